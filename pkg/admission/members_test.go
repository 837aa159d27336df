package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzObjectMembers checks objectMembers against encoding/json: it accepts exactly the objects
// json.Valid accepts, and gives each member's name as encoding/json decodes it and its value's
// bytes.
func FuzzObjectMembers(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { "a" : 1 , "b":[true,false,null,{"c":"\u00e9\n"}] } `, `{"a":-0.5e+10,"b":1E2,"c":0}`,
		`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`,
		`{"a":[1,]}`, `{"a":{"b"}}`, `{"a":{"b":1,}}`, `{,}`, `{"a" 1}`, `{"a":1}}`, `{"a":1`, `[]`, `null`,
		`"x"`, `{"\ud800":1,"a\"b":"\\"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\x01\"}", `{"a":[[[[{}]]]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		type member struct {
			Name  string
			Value string
		}
		var got []member
		err := objectMembers(data, func(name, value []byte) error {
			got = append(got, member{string(name), string(value)})
			return nil
		})
		trimmed := bytes.TrimLeft(data, " \t\r\n")
		wantOK := json.Valid(data) && len(trimmed) > 0 && trimmed[0] == '{'
		if (err == nil) != wantOK {
			t.Fatalf("objectMembers(%q) = %v; json.Valid %v", data, err, json.Valid(data))
		}
		if !wantOK {
			return
		}
		// The members in order, as encoding/json's tokenizer reads them.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if _, err := dec.Token(); err != nil {
			t.Fatal(err)
		}
		var want []member
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var value json.RawMessage
			if err := dec.Decode(&value); err != nil {
				t.Fatal(err)
			}
			want = append(want, member{name.(string), string(value)})
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("objectMembers(%q) (-want +got):\n%s", data, diff)
		}
	})
}

// BenchmarkObjectMembers compares objectMembers with encoding/json's ways of reading a VcJob's
// members: validating it, and decoding it into raw members as decode did before the scanner.
func BenchmarkObjectMembers(b *testing.B) {
	job := vcjob().label("team", "a").generateName("bench-")
	for _, task := range []string{"worker", "ps", "chief", "evaluator"} {
		job.task(task, map[string]string{"role": task})
	}
	raw := job.raw(b)
	for _, bc := range []struct {
		name string
		read func() error
	}{
		{"objectMembers", func() error {
			return objectMembers(raw, func(_, _ []byte) error { return nil })
		}},
		{"json.Valid", func() error {
			if !json.Valid(raw) {
				return errors.New("invalid")
			}
			return nil
		}},
		{"json.Unmarshal-RawMessage", func() error {
			var members map[string]json.RawMessage
			return json.Unmarshal(raw, &members)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
