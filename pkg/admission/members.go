package admission

import (
	"encoding/json"
	"fmt"
)

// The request object is read by objectMembers, a scanner that hands over the bytes of each
// top-level member and builds nothing: decode (handler.go) unmarshals only the members the
// mutators read. encoding/json, even into map[string]json.RawMessage, scans the whole object
// twice (once to validate, once to decode) and copies every member's bytes; for a VcJob most of
// those are its pod templates, which no mutator reads. The scanner still validates every byte as
// json.Valid does (FuzzObjectMembers holds it to that), in one pass, twice as fast as json.Valid
// and seven times as fast as the decoding it replaced (BenchmarkObjectMembers), so that no
// verdict depends on bytes nobody looked at: the API server's object is always valid JSON (and
// controller-runtime has checked the review it came in), but a caller of Handle may send
// anything, and a duplicate "metadata" after the spec must be seen to be refused.

// maxNesting is encoding/json's limit on nested arrays and objects, which the scanner keeps so
// that it accepts exactly what json.Valid does.
const maxNesting = 10000

// objectMembers calls visit with the name (unescaped as encoding/json does; valid only during the
// call) and the bytes (without surrounding whitespace) of each member of the JSON object data, in
// order, duplicates included, and returns the first error of visit. Unless all of data is one
// valid JSON object it returns an error, after calling visit for the members before the fault.
func objectMembers(data []byte, visit func(name, value []byte) error) error {
	s := scanner{data: data}
	s.space()
	if s.i < len(data) && data[s.i] != '{' {
		// Scan it whole first: invalid JSON is reported as such whatever its first byte.
		kind := jsonKind(data[s.i])
		if err := s.value(0); err != nil {
			return err
		}
		if err := s.end(); err != nil {
			return err
		}
		return fmt.Errorf("the value is %s, want an object", kind)
	}
	if err := s.expect('{'); err != nil {
		return err
	}
	s.space()
	if s.i < len(data) && data[s.i] == '}' {
		s.i++
		return s.end()
	}
	for {
		name, err := s.name()
		if err != nil {
			return err
		}
		s.space()
		start := s.i
		if err := s.value(1); err != nil {
			return err
		}
		if err := visit(name, data[start:s.i]); err != nil {
			return err
		}
		s.space()
		if s.i < len(data) && data[s.i] == '}' {
			s.i++
			return s.end()
		}
		if err := s.expect(','); err != nil {
			return err
		}
	}
}

// scanner walks JSON text without building anything.
type scanner struct {
	data []byte
	i    int // the next byte
	// stack holds the open arrays and objects of value, without allocating for up to its size.
	stack [64]byte
}

// jsonKind names the JSON type of a valid value other than an object by its first byte, for errors.
func jsonKind(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func (s *scanner) space() {
	if s.i < len(s.data) && s.data[s.i] > ' ' {
		return // the usual case, in the API server's compact JSON
	}
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// syntaxError describes the fault at the current byte.
func (s *scanner) syntaxError(what string) error {
	if s.i >= len(s.data) {
		return fmt.Errorf("invalid JSON: unexpected end of input, want %s", what)
	}
	return fmt.Errorf("invalid JSON at byte %d: %q, want %s", s.i, s.data[s.i], what)
}

func (s *scanner) expect(c byte) error {
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return nil
	}
	return s.syntaxError(fmt.Sprintf("%q", c))
}

// end accepts only whitespace after the top-level value.
func (s *scanner) end() error {
	s.space()
	if s.i < len(s.data) {
		return s.syntaxError("the end after the object")
	}
	return nil
}

// name scans a member's name and the colon after it, and returns the name unescaped. Names
// without escapes or bytes beyond ASCII, all of the API's, are taken as they are; encoding/json
// decodes the others (it replaces invalid UTF-8).
func (s *scanner) name() ([]byte, error) {
	raw, plain, err := s.key()
	if err != nil {
		return nil, err
	}
	if plain {
		return raw[1 : len(raw)-1], nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		return nil, fmt.Errorf("decode member name %s: %w", raw, err)
	}
	return []byte(name), nil
}

// key scans a member's name and the colon after it, and returns the name's bytes, quotes
// included, and whether it is plain (see str).
func (s *scanner) key() (raw []byte, plain bool, err error) {
	s.space()
	start := s.i
	if plain, err = s.str(); err != nil {
		return nil, false, err
	}
	raw = s.data[start:s.i]
	s.space()
	return raw, plain, s.expect(':')
}

// str scans a string and reports whether it is plain: no escapes, only ASCII.
func (s *scanner) str() (plain bool, err error) {
	if err := s.expect('"'); err != nil {
		return false, err
	}
	plain = true
	for s.i < len(s.data) {
		// The bytes that end or escape a string, or may not appear in one, are rare: skip the others
		// in a tight loop.
		data, i := s.data, s.i
		for i < len(data) && plainByte[data[i]] {
			i++
		}
		s.i = i
		if i >= len(data) {
			break
		}
		switch c := data[i]; {
		case c == '"':
			s.i++
			return plain, nil
		case c == '\\':
			plain = false
			if err := s.escape(); err != nil {
				return false, err
			}
		case c < 0x20:
			return false, s.syntaxError("no control character in a string")
		default:
			if c >= 0x80 {
				plain = false
			}
			s.i++
		}
	}
	return false, s.syntaxError(`'"' closing the string`)
}

// escape scans a backslash escape in a string.
func (s *scanner) escape() error {
	s.i++ // the backslash
	if s.i >= len(s.data) {
		return s.syntaxError("an escape")
	}
	switch s.data[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
		return nil
	case 'u':
		s.i++
		for range 4 {
			if s.i >= len(s.data) || !isHex(s.data[s.i]) {
				return s.syntaxError(`a hex digit of a \u escape`)
			}
			s.i++
		}
		return nil
	}
	return s.syntaxError("an escape")
}

// plainByte marks the bytes a string may hold as they are: not '"', '\\', a control character or
// a byte beyond ASCII (which makes a name not plain).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// value scans one value, nested arrays and objects included, inside depth arrays and objects. It
// works iteratively: hostile nesting costs a byte of memory each, not a call frame.
func (s *scanner) value(depth int) error {
	open := s.stack[:0] // '{' or '[' for each array or object the scan is in
	for {
		s.space()
		if s.i >= len(s.data) {
			return s.syntaxError("a value")
		}
		switch c := s.data[s.i]; c {
		case '{', '[':
			if depth+len(open)+1 > maxNesting {
				return fmt.Errorf("invalid JSON at byte %d: nested deeper than %d", s.i, maxNesting)
			}
			s.i++
			s.space()
			if s.i < len(s.data) && s.data[s.i] == closing(c) {
				s.i++ // empty: a complete value
				break
			}
			open = append(open, c)
			if c == '{' {
				if _, _, err := s.key(); err != nil {
					return err
				}
			}
			continue
		case '"':
			if _, err := s.str(); err != nil {
				return err
			}
		case 't':
			if err := s.literal("true"); err != nil {
				return err
			}
		case 'f':
			if err := s.literal("false"); err != nil {
				return err
			}
		case 'n':
			if err := s.literal("null"); err != nil {
				return err
			}
		default:
			if err := s.number(); err != nil {
				return err
			}
		}
		// A value is complete: close what it completes, and go on to the next member or element.
		var err error
		if open, err = s.next(open); err != nil || len(open) == 0 {
			return err
		}
	}
}

// next follows a complete value inside the arrays and objects of open: it closes those that end
// there and returns the ones still open, having scanned the comma (and for an object the next
// member's name) before the next value.
func (s *scanner) next(open []byte) ([]byte, error) {
	for len(open) > 0 {
		s.space()
		top := open[len(open)-1]
		if s.i < len(s.data) && s.data[s.i] == closing(top) {
			s.i++
			open = open[:len(open)-1]
			continue
		}
		if s.i >= len(s.data) || s.data[s.i] != ',' {
			return nil, s.syntaxError(fmt.Sprintf("',' or %q", closing(top)))
		}
		s.i++
		if top == '{' {
			if _, _, err := s.key(); err != nil {
				return nil, err
			}
		}
		return open, nil
	}
	return open, nil
}

// closing is the byte that closes an array or object opened by c.
func closing(c byte) byte {
	if c == '{' {
		return '}'
	}
	return ']'
}

func (s *scanner) literal(word string) error {
	if len(s.data)-s.i >= len(word) && string(s.data[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return nil
	}
	return s.syntaxError(word)
}

// number scans a number as JSON's grammar has it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() error {
	if s.i < len(s.data) && s.data[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.data) && s.data[s.i] == '0':
		s.i++
	case s.i < len(s.data) && isDigit(s.data[s.i]):
		s.digits()
	default:
		return s.syntaxError("a value")
	}
	if s.i < len(s.data) && s.data[s.i] == '.' {
		s.i++
		if s.i >= len(s.data) || !isDigit(s.data[s.i]) {
			return s.syntaxError("a digit after the decimal point")
		}
		s.digits()
	}
	if s.i < len(s.data) && (s.data[s.i] == 'e' || s.data[s.i] == 'E') {
		s.i++
		if s.i < len(s.data) && (s.data[s.i] == '+' || s.data[s.i] == '-') {
			s.i++
		}
		if s.i >= len(s.data) || !isDigit(s.data[s.i]) {
			return s.syntaxError("a digit of the exponent")
		}
		s.digits()
	}
	return nil
}

func (s *scanner) digits() {
	for s.i < len(s.data) && isDigit(s.data[s.i]) {
		s.i++
	}
}
