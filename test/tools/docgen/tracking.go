package main

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"

	"regexp"
	"sort"
	"strings"

	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
)

// external are the constants of other modules that pkg/tracking's names are made of: an
// expression the generator cannot evaluate must be added here, where the compiler checks it.
var external = map[string]string{
	"batchv1alpha1.JobNameKey": batchv1alpha1.JobNameKey,
}

// key is one finalizer, label or annotation name of the contract.
type key struct {
	Kind, Name, GoName, Doc string
}

// keyKinds group the contract's names by the suffix of their Go names.
var keyKinds = []struct{ suffix, title string }{
	{"Finalizer", "Finalizers"},
	{"Label", "Labels"},
	{"Annotation", "Annotations"},
}

// qualifiedName is a Kubernetes key with a prefix: what a finalizer, label or annotation is.
var qualifiedName = regexp.MustCompile(`^[a-z0-9.-]+/[A-Za-z0-9._-]+$`)

// keysOf reads the exported string constants of the package in dir whose Go names end in
// Finalizer, Label or Annotation, with their doc comments, and the annotations of its
// SubmitterExtras.
func keysOf(dir string) ([]key, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", dir, err)
	}
	var keys []key
	for _, pkg := range pkgs {
		var files []*ast.File
		for _, f := range pkg.Files {
			files = append(files, f)
		}
		consts := packageConsts(files)
		for _, f := range files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, s := range g.Specs {
					vs, ok := s.(*ast.ValueSpec)
					if !ok {
						continue
					}
					switch g.Tok {
					case token.CONST:
						k, err := constKeys(vs, consts)
						if err != nil {
							return nil, err
						}
						keys = append(keys, k...)
					case token.VAR:
						if vs.Doc == nil {
							vs.Doc = g.Doc // a lone var's comment is its declaration's
						}
						keys = append(keys, extraKeys(vs, consts)...)
					}
				}
			}
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no finalizer, label or annotation in %s", dir)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Name < keys[j].Name })
	return keys, nil
}

// constKeys are the contract's names among one const spec's names.
func constKeys(vs *ast.ValueSpec, consts map[string]string) ([]key, error) {
	var out []key
	for i, n := range vs.Names {
		kind := kindOf(n.Name)
		if !n.IsExported() || kind == "" || i >= len(vs.Values) {
			continue
		}
		v, err := constString(vs.Values[i], consts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (add it to docgen's external table)", n.Name, err)
		}
		if !qualifiedName.MatchString(v) {
			continue
		}
		out = append(out, key{Kind: kind, Name: v, GoName: n.Name, Doc: paragraph(vs.Doc.Text())})
	}
	return out, nil
}

// extraKeys are the annotations of a var holding SubmitterExtra literals ({Extra, Annotation}).
func extraKeys(vs *ast.ValueSpec, consts map[string]string) []key {
	var out []key
	for i, n := range vs.Names {
		if i >= len(vs.Values) {
			continue
		}
		lit, ok := vs.Values[i].(*ast.CompositeLit)
		if !ok {
			continue
		}
		for _, el := range lit.Elts {
			entry, ok := el.(*ast.CompositeLit)
			if !ok {
				continue
			}
			fields := map[string]string{}
			for _, e := range entry.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if v, err := constString(kv.Value, consts); err == nil {
						fields[lastName(kv.Key)] = v
					}
				}
			}
			if a := fields["Annotation"]; qualifiedName.MatchString(a) && fields["Extra"] != "" {
				out = append(out, key{Kind: "Annotation", Name: a, GoName: n.Name,
					Doc: fmt.Sprintf("Copied by the webhook at CREATE from the admission request's userInfo extra `%s` (its values joined by \",\"). %s", fields["Extra"], firstSentence(vs.Doc.Text()))})
			}
		}
	}
	return out
}

// kindOf is the kind a Go name's suffix says, or "".
func kindOf(goName string) string {
	for _, k := range keyKinds {
		if strings.HasSuffix(goName, k.suffix) {
			return k.suffix
		}
	}
	return ""
}

// paragraph joins a doc comment's lines into one.
func paragraph(text string) string {
	return strings.Join(strings.Fields(text), " ")
}

// firstSentence is a doc comment's first sentence.
func firstSentence(text string) string {
	return doc.Synopsis(text)
}

// renderKeys is labels-and-annotations.md: the contract's names by kind.
func renderKeys(keys []key) []byte {
	var b strings.Builder
	b.WriteString(generatedNote("the names and doc comments of pkg/tracking"))
	b.WriteString("# Finalizers, labels and annotations\n\nThe contract between the webhook and the archiver, defined once in `pkg/tracking`. The\n" +
		"admission policies that guard every `jobvault.io/` key: [policies.md](../policies.md).\n")
	for _, k := range keyKinds {
		fmt.Fprintf(&b, "\n## %s\n\n| name | Go name | meaning |\n|---|---|---|\n", k.title)
		for _, key := range keys {
			if key.Kind == k.suffix {
				fmt.Fprintf(&b, "| `%s` | `tracking.%s` | %s |\n", key.Name, key.GoName, cell(key.Doc))
			}
		}
	}
	return []byte(b.String())
}
