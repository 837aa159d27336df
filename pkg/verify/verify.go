// Package verify checks what jobvault archived against what it recorded, and names every item it
// finds wrong. It has two scopes:
//   - Job re-reads one job's archive (its logs, their stream indexes, job.json, manifest.json) and
//     compares it with the database: `archiver logs verify`;
//   - Chain recomputes a range of a cluster's audit chain: its links, every manifest and object it
//     lists, every database row it digested, and the signed digests of its head: `archiver audit
//     verify`.
//
// Both only read, report every finding rather than stopping at the first, and return an error only
// when they could not verify at all. A finding is one type in both scopes.
package verify

import (
	"fmt"
	"strings"
)

// Kind is what is wrong with an item.
type Kind string

// Kinds of findings. Missing serves both scopes; Mismatch, Corrupt, Unreadable, Manifest and Record
// compare an archive with the database (Job); Altered, Extra, Reordered and Forged compare the
// chain, the bucket and the database with what the chain sealed (Chain).
const (
	// Missing: a recorded item is gone (an object, a row, a chain entry, a digest).
	Missing Kind = "missing"
	// Mismatch: an object's content differs from the database's record of it (size, stored size
	// or sha256), or job.json names another job.
	Mismatch Kind = "mismatch"
	// Corrupt: an object cannot be decoded (not gzip, truncated, not JSON).
	Corrupt Kind = "corrupt"
	// Unreadable: the store failed to serve an object, which could not be checked.
	Unreadable Kind = "unreadable"
	// Manifest: manifest.json disagrees with the database.
	Manifest Kind = "manifest"
	// Record: the database lacks a record the archive needs (the job's row).
	Record Kind = "record"
	// Altered: the item is there but its bytes or fields are not what the chain sealed.
	Altered Kind = "altered"
	// Extra: an item is there that nothing records.
	Extra Kind = "extra"
	// Reordered: an item is not where the chain puts it (its link to the previous one is broken).
	Reordered Kind = "re-ordered"
	// Forged: a signed digest whose signature does not verify.
	Forged Kind = "forged"
)

// Finding is one thing found wrong, naming the item.
type Finding struct {
	Kind Kind `json:"kind"`
	// Item names what is concerned, for people: "job.json", "manifest.json", a log ("log of
	// container C (current) of pod P (uid U)"), "object KEY", "manifest KEY", "row NAME",
	// "chain entry seq N", "job UID", "digest KEY".
	Item string `json:"item"`
	// Key is the object concerned, when Item does not name it.
	Key string `json:"key,omitempty"`
	// Seq and JobUID place the item in the chain, when it belongs to an entry.
	Seq    int64  `json:"seq,omitempty"`
	JobUID string `json:"jobUID,omitempty"`
	Detail string `json:"detail"`
}

// String formats the finding as one line: kind: item [key] (seq N): detail.
func (f Finding) String() string { return f.line(string(f.Kind) + ":") }

// line formats the finding after a label: label item [key] (seq N): detail. Each scope's report
// keeps the label its command has always printed (Job's in capitals, Chain's as String).
func (f Finding) line(label string) string {
	s := label + " " + f.Item
	if f.Key != "" {
		s += " [" + f.Key + "]"
	}
	if f.Seq != 0 {
		s += fmt.Sprintf(" (seq %d)", f.Seq)
	}
	return s + ": " + f.Detail
}

// Result is what both scopes' reports hold in common: the findings, in a stable order.
type Result struct {
	Findings []Finding `json:"findings"`
}

// OK reports whether nothing was found.
func (r Result) OK() bool { return len(r.Findings) == 0 }

// writeFindings writes one line a finding, each after label(kind).
func (r Result) writeFindings(b *strings.Builder, label func(Kind) string) {
	for _, f := range r.Findings {
		b.WriteString(f.line(label(f.Kind)) + "\n")
	}
}

// short abbreviates a sha256 for a finding's detail.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	if sha == "" {
		return `""`
	}
	return sha
}
