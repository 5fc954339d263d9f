package testserver

import (
	"bytes"
	"encoding/xml"
	"io"
	"testing"
)

// SVGText parses doc as XML, fails t unless its root is <svg>, and
// returns the text of its <text> elements and how many <path> elements
// it has.
func SVGText(t testing.TB, doc []byte) (texts []string, paths int) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var stack []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%.2000s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg", tok.Name)
			}
			if tok.Name.Local == "path" {
				paths++
			}
			stack = append(stack, tok.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] == "text" {
				texts = append(texts, string(tok))
			}
		}
	}
	if len(texts) == 0 {
		t.Fatalf("no <svg> with text in:\n%.2000s", doc)
	}
	return texts, paths
}
