package artifact

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	parley "github.com/parleyhq/parley"
)

// dropped are the elements CleanSVG removes with everything inside them: scripts, and elements
// that embed HTML or other documents.
var dropped = map[string]bool{
	"script": true, "foreignobject": true, "iframe": true, "embed": true, "object": true,
	"audio": true, "video": true, "handler": true, "listener": true,
}

var (
	cssURL      = regexp.MustCompile(`(?i)url\(\s*(['"]?)([^'")]*)(['"]?)\s*\)`)
	cssImport   = regexp.MustCompile(`(?i)@import[^;]*;?`)
	safeDataImg = regexp.MustCompile(`(?i)^data:image/(png|jpeg|gif|webp);base64,`)
)

// CleanSVG checks that src is one well-formed SVG document and removes what could run code or
// reach the network: script and foreignObject elements (and other embedding elements), on*
// event handlers, href and xlink:href that do not point inside the image (#id) or hold an inline
// raster image, url(…) references outside the image in attributes and style sheets, @import,
// animations that set an href or a handler, comments, processing instructions and DOCTYPEs. It
// returns the cleaned SVG and what it removed.
func CleanSVG(src string) (string, []string, error) {
	d := xml.NewDecoder(strings.NewReader(src))
	d.Strict = true
	var (
		out     bytes.Buffer
		stack   []string // raw names of the open elements
		skip    int      // depth inside a dropped element
		rootSet bool
		removed = map[string]int{}
		inStyle bool
	)
	for {
		tok, err := d.RawToken()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, invalid(parley.ArtifactSVG, "not well-formed XML: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			name := rawName(t.Name)
			local := strings.ToLower(t.Name.Local)
			if len(stack) == 0 {
				if rootSet {
					return "", nil, invalid(parley.ArtifactSVG, "there is more than one root element; the document must be one <svg> element")
				}
				if local != "svg" {
					return "", nil, invalid(parley.ArtifactSVG, "the root element is <%s>; it must be <svg>", name)
				}
				rootSet = true
			}
			stack = append(stack, name)
			if skip > 0 {
				skip++
				continue
			}
			if dropped[local] || ((local == "set" || local == "animate") && animatesUnsafe(t.Attr)) {
				removed["<"+t.Name.Local+"> element"]++
				skip = 1
				continue
			}
			out.WriteByte('<')
			out.WriteString(name)
			for _, a := range t.Attr {
				v, ok := cleanAttr(a, removed)
				if !ok {
					continue
				}
				out.WriteByte(' ')
				out.WriteString(rawName(a.Name))
				out.WriteString(`="`)
				xml.EscapeText(&out, []byte(v))
				out.WriteByte('"')
			}
			out.WriteByte('>')
			inStyle = local == "style"
		case xml.EndElement:
			name := rawName(t.Name)
			if len(stack) == 0 || stack[len(stack)-1] != name {
				return "", nil, invalid(parley.ArtifactSVG, "not well-formed XML: </%s> does not close the open element", name)
			}
			stack = stack[:len(stack)-1]
			inStyle = false
			if skip > 0 {
				skip--
				continue
			}
			out.WriteString("</" + name + ">")
		case xml.CharData:
			if skip > 0 {
				continue
			}
			if len(stack) == 0 {
				if strings.TrimSpace(string(t)) != "" {
					return "", nil, invalid(parley.ArtifactSVG, "text outside the <svg> element")
				}
				continue
			}
			text := string(t)
			if inStyle {
				text = cleanCSS(text, removed)
			}
			xml.EscapeText(&out, []byte(text))
		case xml.Comment:
		case xml.ProcInst:
			if t.Target != "xml" {
				removed["processing instruction"]++
			}
		case xml.Directive:
			removed["DOCTYPE or directive"]++
		}
	}
	if !rootSet {
		return "", nil, invalid(parley.ArtifactSVG, "there is no <svg> element")
	}
	if len(stack) > 0 {
		return "", nil, invalid(parley.ArtifactSVG, "not well-formed XML: <%s> is never closed", stack[len(stack)-1])
	}
	notes := make([]string, 0, len(removed))
	for k, n := range removed {
		notes = append(notes, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(notes)
	return out.String(), notes, nil
}

func rawName(n xml.Name) string {
	if n.Space != "" {
		return n.Space + ":" + n.Local
	}
	return n.Local
}

// cleanAttr returns the value to keep of attribute a, or false to drop it.
func cleanAttr(a xml.Attr, removed map[string]int) (string, bool) {
	local := strings.ToLower(a.Name.Local)
	v := a.Value
	switch {
	case strings.HasPrefix(local, "on"):
		removed["event handler ("+a.Name.Local+")"]++
		return "", false
	case local == "href":
		if !internalRef(v) {
			removed["external reference ("+rawName(a.Name)+")"]++
			return "", false
		}
		return v, true
	case strings.Contains(strings.ToLower(v), "javascript:"):
		removed["javascript: URL ("+rawName(a.Name)+")"]++
		return "", false
	case local == "style" || strings.Contains(strings.ToLower(v), "url("):
		return cleanCSS(v, removed), true
	}
	return v, true
}

func internalRef(v string) bool {
	v = strings.TrimSpace(v)
	return strings.HasPrefix(v, "#") || safeDataImg.MatchString(v)
}

// cleanCSS removes @import rules and url(…) references that leave the image.
func cleanCSS(css string, removed map[string]int) string {
	css = cssImport.ReplaceAllStringFunc(css, func(string) string {
		removed["@import rule"]++
		return ""
	})
	return cssURL.ReplaceAllStringFunc(css, func(m string) string {
		ref := cssURL.FindStringSubmatch(m)[2]
		if internalRef(ref) {
			return m
		}
		removed["external url() reference"]++
		return "none"
	})
}

// animatesUnsafe reports whether a <set> or <animate> changes an href or an event handler.
func animatesUnsafe(attrs []xml.Attr) bool {
	for _, a := range attrs {
		if strings.EqualFold(a.Name.Local, "attributeName") {
			v := strings.ToLower(strings.TrimSpace(a.Value))
			if strings.HasSuffix(v, "href") || strings.HasPrefix(v, "on") {
				return true
			}
		}
	}
	return false
}
