package main

import "testing"

func TestParseTxt(t *testing.T) {
	// Lines in the layout of confusables.txt (code points made up for the test's sake are real:
	// CYRILLIC SMALL LETTER A → LATIN SMALL LETTER A; a two-character prototype; a comment line).
	data := []byte("\ufeff# confusables.txt\n\n0430 ;\t0061 ;\tMA\t# ( а → a ) CYRILLIC SMALL LETTER A → LATIN SMALL LETTER A\n" +
		"33C2 ;\t0061 002E 006D 002E ;\tMA\t# ( ㏂ → a.m. )\n")
	m, err := parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if m["\u0430"] != "a" || m["\u33c2"] != "a.m." || len(m) != 2 {
		t.Fatalf("parse = %q", m)
	}
	if _, err := parse([]byte("0430 0061\n")); err == nil {
		t.Fatal("a line without ';' parsed")
	}
	if _, err := parse([]byte(`{"а":"a"}`)); err != nil {
		t.Fatal(err)
	}
}
