package llmctx

import (
	"strings"

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
// them natively. A result is "error" when its text starts with "error" (how Parley words a failed call). The id and
// name are XML-escaped; in the result only a closing tag of the envelope is broken up, so that
// JSON and code reach the model as they are. msgs is not changed.
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
		b.WriteString(envelopeSafe(text))
		b.WriteString("\n  </result>\n</tool_result>")
		if i+1 == len(msgs) || msgs[i+1].Role != parley.RoleTool {
			out = append(out, parley.Message{Role: parley.RoleUser, Content: parley.Text(b.String())})
			b.Reset()
		}
	}
	return out
}

var xmlReplacer = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func xmlEscape(s string) string { return xmlReplacer.Replace(s) }

// envelopeReplacer breaks up the closing tags of the envelope inside a result.
var envelopeReplacer = strings.NewReplacer("</result>", "<\\/result>", "</tool_result>", "<\\/tool_result>")

func envelopeSafe(s string) string { return envelopeReplacer.Replace(s) }

// callsAsText returns m with its tool calls written after its text.
func callsAsText(m parley.Message) parley.Message {
	var b strings.Builder
	b.WriteString(m.Content.String())
	for _, c := range m.ToolCalls {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("<tool_call>\n  <tool_call_id>")
		b.WriteString(xmlEscape(c.ID))
		b.WriteString("</tool_call_id>\n  <name>")
		b.WriteString(xmlEscape(c.Function.Name))
		b.WriteString("</name>\n  <arguments>")
		b.WriteString(strings.ReplaceAll(c.Function.Arguments, "</arguments>", "<\\/arguments>"))
		b.WriteString("</arguments>\n</tool_call>")
	}
	m.Content, m.ToolCalls = parley.Text(b.String()), nil
	return m
}
