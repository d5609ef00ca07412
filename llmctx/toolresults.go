package llmctx

import (
	"strings"
	"unicode/utf8"

	"github.com/parleyhq/parley"
)

// ToolResultsAsText returns msgs with each run of tool messages replaced by one user message
// that carries the results as text, in the XML envelope of seed 003 §7, and the tool calls of
// assistant messages written into their text in a like envelope (an OpenAI-compatible endpoint
// refuses tool calls that no tool message answers):
//
//	<tool_call>
//	  <tool_call_id>call_1</tool_call_id>
//	  <name>get_weather</name>
//	  <arguments>{"city":"Paris"}</arguments>
//	</tool_call>
//
//	<tool_result>
//	  <tool_call_id>call_1</tool_call_id>
//	  <name>get_weather</name>
//	  <status>success</status>
//	  <result>
//	18°C
//	  </result>
//	</tool_result>
//
// It is for models without a native tool role; tools are still offered, so the model may call
// them natively. A result is "error" when its text starts with "error" (how Parley words a failed
// call). Every interpolated field (id, name, arguments, result, and the text of an assistant
// message whose calls are written out) is escaped as XML character data: '&', '<' and '>' become
// entities, '\r' a character reference, and characters XML cannot carry U+FFFD, so that no text a
// tool or a model produced can open or close an element of the envelope; an XML parser reading
// the message gets every field back as it was. msgs is not changed.
func ToolResultsAsText(msgs []parley.Message) []parley.Message {
	names := map[string]string{}
	out := make([]parley.Message, 0, len(msgs))
	var b strings.Builder
	for i, m := range msgs {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Function.Name
		}
		if m.Role == parley.RoleAssistant && len(m.ToolCalls) > 0 {
			out = append(out, callsAsText(m))
			continue
		}
		if m.Role != parley.RoleTool {
			out = append(out, m)
			continue
		}
		name := names[m.ToolCallID]
		if name == "" {
			name = m.Name
		}
		text := m.Content.String()
		status := "success"
		if strings.HasPrefix(text, "error") {
			status = "error"
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("<tool_result>\n  <tool_call_id>")
		b.WriteString(xmlEscape(m.ToolCallID))
		b.WriteString("</tool_call_id>\n  <name>")
		b.WriteString(xmlEscape(name))
		b.WriteString("</name>\n  <status>")
		b.WriteString(status)
		b.WriteString("</status>\n  <result>\n")
		b.WriteString(xmlEscape(text))
		b.WriteString("\n  </result>\n</tool_result>")
		if i+1 == len(msgs) || msgs[i+1].Role != parley.RoleTool {
			out = append(out, parley.Message{Role: parley.RoleUser, Content: parley.Text(b.String())})
			b.Reset()
		}
	}
	return out
}

// xmlEscape returns s as XML character data: the markup characters as entities, a carriage
// return as a character reference (a parser would turn a raw one into a newline), and the
// characters XML 1.0 does not allow (most C0 controls, lone surrogates, U+FFFE, U+FFFF) as U+FFFD.
func xmlEscape(s string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if r == '&' || r == '<' || r == '>' || r == '\r' || !xmlChar(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '\r':
			b.WriteString("&#xD;")
		case !xmlChar(r):
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// xmlChar reports whether r is in XML 1.0's Char production. An invalid UTF-8 byte decodes as
// U+FFFD, which is.
func xmlChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF
}

// callsAsText returns m with its tool calls written after its text.
func callsAsText(m parley.Message) parley.Message {
	var b strings.Builder
	b.WriteString(xmlEscape(m.Content.String()))
	for _, c := range m.ToolCalls {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("<tool_call>\n  <tool_call_id>")
		b.WriteString(xmlEscape(c.ID))
		b.WriteString("</tool_call_id>\n  <name>")
		b.WriteString(xmlEscape(c.Function.Name))
		b.WriteString("</name>\n  <arguments>")
		b.WriteString(xmlEscape(c.Function.Arguments))
		b.WriteString("</arguments>\n</tool_call>")
	}
	m.Content, m.ToolCalls = parley.Text(b.String()), nil
	return m
}
