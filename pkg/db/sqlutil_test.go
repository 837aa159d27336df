package db

import "testing"

func TestJSONBSafe(t *testing.T) {
	for _, tc := range []struct {
		in, jsonb string
		raw       bool
	}{
		{in: `{"a": "b"}`, jsonb: `{"a": "b"}`},
		{in: `{"a": "x\u0000y"}`, jsonb: `{"a": "x\ufffdy"}`, raw: true},
		// An escaped backslash followed by the characters u0000: no U+0000.
		{in: `{"a": "\\u0000"}`, jsonb: `{"a": "\\u0000"}`},
		{in: `{"a": "\\\u0000\"\u0000"}`, jsonb: `{"a": "\\\ufffd\"\ufffd"}`, raw: true},
		{in: `["\u00001"]`, jsonb: `["\ufffd1"]`, raw: true},
	} {
		jsonb, raw := jsonbSafe(tc.in)
		if jsonb != tc.jsonb || (raw != nil) != tc.raw || (raw != nil && raw != tc.in) {
			t.Errorf("jsonbSafe(%s) = %v, %v; want %s, raw %t", tc.in, jsonb, raw, tc.jsonb, tc.raw)
		}
	}
	if jsonb, raw := jsonbSafe(nil); jsonb != nil || raw != nil {
		t.Errorf("jsonbSafe(nil) = %v, %v; want nil, nil", jsonb, raw)
	}
}
