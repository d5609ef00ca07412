package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	parley "github.com/parleyhq/parley"
)

// geminiWire is the Gemini API: generateContent, and streamGenerateContent with alt=sse, whose
// events are whole GenerateContentResponse objects; function calls arrive whole.
type geminiWire struct{}

type geminiPart struct {
	Text       string `json:"text,omitempty"`
	Thought    bool   `json:"thought,omitempty"`
	InlineData *struct {
		MimeType string `json:"mimeType"`
		Data     string `json:"data"`
	} `json:"inlineData,omitempty"`
	FileData *struct {
		MimeType string `json:"mimeType"`
		FileURI  string `json:"fileUri"`
	} `json:"fileData,omitempty"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
	ThoughtSignature string `json:"thoughtSignature,omitempty"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

type geminiRequest struct {
	Contents          []geminiContent `json:"contents"`
	SystemInstruction *geminiContent  `json:"systemInstruction"`
	Tools             []struct {
		FunctionDeclarations []struct {
			Name                 string          `json:"name"`
			Description          string          `json:"description"`
			Parameters           json.RawMessage `json:"parameters"`
			ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	ToolConfig *struct {
		FunctionCallingConfig struct {
			Mode string `json:"mode"`
		} `json:"functionCallingConfig"`
	} `json:"toolConfig"`
}

// geminiSignature is the thought signature the fake gives its function calls, and checks.
const geminiSignature = "bGxtdGVzdC10aG91Z2h0"

func (geminiWire) decode(r *http.Request, body []byte) (*Request, error) {
	model, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
	stream := method == "streamGenerateContent"
	if stream && r.URL.Query().Get("alt") != "sse" {
		return nil, errors.New("this fake streams only with alt=sse")
	}
	var w geminiRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("Invalid JSON payload received. %v", err)
	}
	if len(w.Contents) == 0 {
		return nil, errors.New("* GenerateContentRequest.contents: contents is not specified")
	}
	req := &Request{Model: model, Stream: stream, Raw: json.RawMessage(body)}
	if w.SystemInstruction != nil {
		var b strings.Builder
		for _, p := range w.SystemInstruction.Parts {
			b.WriteString(p.Text)
		}
		req.Messages = append(req.Messages, parley.Message{Role: parley.RoleSystem, Content: parley.Text(b.String())})
	}
	// Gemini 3 refuses a function call of the current turn without its thought signature.
	strict := strings.HasPrefix(model, "gemini-3")
	lastUser := -1
	for i, c := range w.Contents {
		if c.Role == "user" && saysSomething(c.Parts) {
			lastUser = i
		}
	}
	var openCalls []string // function names the next user turn must answer, in order
	ids := 0
	for i, c := range w.Contents {
		if len(c.Parts) == 0 {
			return nil, fmt.Errorf("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty", i)
		}
		switch c.Role {
		case "user":
			var parts []parley.Part
			answered := 0
			for j, p := range c.Parts {
				switch {
				case p.FunctionResponse != nil:
					if answered >= len(openCalls) || p.FunctionResponse.Name != openCalls[answered] {
						return nil, fmt.Errorf("* GenerateContentRequest.contents[%d].parts[%d].function_response: Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn", i, j)
					}
					var obj map[string]any
					if json.Unmarshal(p.FunctionResponse.Response, &obj) != nil {
						return nil, fmt.Errorf("* GenerateContentRequest.contents[%d].parts[%d].function_response.response: must be an object", i, j)
					}
					out, _ := obj["output"].(string)
					req.Messages = append(req.Messages, parley.Message{Role: parley.RoleTool, ToolCallID: fmt.Sprintf("gemini-call-%d", ids-len(openCalls)+answered), Content: parley.Text(out)})
					answered++
				case p.Text != "":
					parts = append(parts, parley.Part{Type: "text", Text: p.Text})
				case p.InlineData != nil:
					parts = append(parts, parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: "data:" + p.InlineData.MimeType + ";base64," + p.InlineData.Data}})
				case p.FileData != nil:
					parts = append(parts, parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: p.FileData.FileURI}})
				default:
					return nil, fmt.Errorf("* GenerateContentRequest.contents[%d].parts[%d].data: required oneof field 'data' must have one initialized field", i, j)
				}
			}
			if answered != len(openCalls) {
				return nil, fmt.Errorf("* GenerateContentRequest.contents[%d]: Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn", i)
			}
			openCalls = nil
			if len(parts) == 1 {
				req.Messages = append(req.Messages, parley.Message{Role: parley.RoleUser, Content: parley.Text(parts[0].Text)})
			} else if len(parts) > 0 {
				req.Messages = append(req.Messages, parley.Message{Role: parley.RoleUser, Content: parley.Parts(parts...)})
			}
		case "model":
			if len(openCalls) > 0 {
				return nil, fmt.Errorf("* GenerateContentRequest.contents[%d]: a function call turn must be followed by a function response turn", i)
			}
			m := parley.Message{Role: parley.RoleAssistant}
			var text strings.Builder
			for j, p := range c.Parts {
				switch {
				case p.FunctionCall != nil:
					if strict && i > lastUser && len(openCalls) == 0 && p.ThoughtSignature == "" {
						return nil, fmt.Errorf("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d", p.FunctionCall.Name, j+1)
					}
					if sig := p.ThoughtSignature; sig != "" && sig != geminiSignature && sig != "skip_thought_signature_validator" && sig != "context_engineering_is_the_way_to_go" {
						return nil, fmt.Errorf("* GenerateContentRequest.contents[%d].parts[%d].thought_signature: Corrupted thought signature", i, j)
					}
					openCalls = append(openCalls, p.FunctionCall.Name)
					m.ToolCalls = append(m.ToolCalls, parley.ToolCall{ID: fmt.Sprintf("gemini-call-%d", ids), Type: "function",
						Function: parley.FunctionCall{Name: p.FunctionCall.Name, Arguments: string(p.FunctionCall.Args)}})
					ids++
				case p.Text != "":
					text.WriteString(p.Text)
				}
			}
			if text.Len() > 0 || len(m.ToolCalls) == 0 {
				m.Content = parley.Text(text.String())
			}
			req.Messages = append(req.Messages, m)
		default:
			return nil, fmt.Errorf("* GenerateContentRequest.contents[%d].role: Please use a valid role: user, model", i)
		}
	}
	if len(openCalls) > 0 {
		return nil, errors.New("* GenerateContentRequest.contents: the last function call turn has no function response turn")
	}
	for _, t := range w.Tools {
		for _, d := range t.FunctionDeclarations {
			if d.Name == "" || (len(d.Parameters) > 0 && len(d.ParametersJSONSchema) > 0) {
				return nil, errors.New("* GenerateContentRequest.tools: a function declaration needs a name and at most one of parameters, parametersJsonSchema")
			}
			params := d.ParametersJSONSchema
			if len(params) == 0 {
				params = d.Parameters
			}
			req.Tools = append(req.Tools, parley.ToolSpec{Name: d.Name, Description: d.Description, Parameters: params})
		}
	}
	if w.ToolConfig != nil {
		req.ToolChoice = map[string]string{"AUTO": "auto", "ANY": "required", "NONE": "none"}[w.ToolConfig.FunctionCallingConfig.Mode]
	}
	return req, nil
}

// saysSomething reports whether a user turn says something (not only function responses).
func saysSomething(parts []geminiPart) bool {
	for _, p := range parts {
		if p.FunctionResponse == nil {
			return true
		}
	}
	return false
}

func (geminiWire) writeError(w http.ResponseWriter, status int, msg string) {
	st := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
		429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}[status]
	if st == "" {
		st = "UNKNOWN"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "status": st}})
}

// geminiParts returns the answer's parts: a thought summary, text, then whole function calls,
// the first of them signed.
func (s *Server) geminiParts(t Turn) [][]map[string]any {
	var chunks [][]map[string]any
	if t.Reasoning != "" {
		chunks = append(chunks, []map[string]any{{"text": t.Reasoning, "thought": true}})
	}
	for _, piece := range split(t.Content, s.chunkSize*2) {
		chunks = append(chunks, []map[string]any{{"text": piece}})
	}
	var calls []map[string]any
	for i, c := range t.ToolCalls {
		args := json.RawMessage(c.Function.Arguments)
		if !json.Valid(args) {
			args = json.RawMessage(`{}`)
		}
		p := map[string]any{"functionCall": map[string]any{"name": c.Function.Name, "args": args}}
		if i == 0 {
			p["thoughtSignature"] = geminiSignature
		}
		calls = append(calls, p)
	}
	if len(calls) > 0 {
		chunks = append(chunks, calls)
	}
	if len(chunks) == 0 {
		chunks = append(chunks, []map[string]any{{"text": ""}})
	}
	return chunks
}

func geminiUsage(u *parley.Usage) map[string]any {
	return map[string]any{"promptTokenCount": u.PromptTokens, "candidatesTokenCount": u.CompletionTokens - u.ReasoningTokens,
		"thoughtsTokenCount": u.ReasoningTokens, "cachedContentTokenCount": u.CachedTokens, "totalTokenCount": u.PromptTokens + u.CompletionTokens}
}

func geminiFinish(t Turn) string {
	switch t.FinishReason {
	case "length":
		return "MAX_TOKENS"
	case "content_filter":
		return "SAFETY"
	}
	return "STOP"
}

func (geminiWire) frames(s *Server, c completion, _ *Request, t Turn) []string {
	chunks := s.geminiParts(t)
	var out []string
	for i, parts := range chunks {
		cand := map[string]any{"content": map[string]any{"parts": parts, "role": "model"}, "index": 0}
		resp := map[string]any{"candidates": []any{cand}, "modelVersion": c.model, "responseId": c.id}
		if i == len(chunks)-1 {
			cand["finishReason"] = geminiFinish(t)
			resp["usageMetadata"] = geminiUsage(t.Usage)
		} else {
			resp["usageMetadata"] = map[string]any{"promptTokenCount": t.Usage.PromptTokens, "totalTokenCount": t.Usage.PromptTokens}
		}
		b, _ := json.Marshal(resp)
		out = append(out, "data: "+string(b)+"\r\n\r\n")
	}
	return out
}

func (geminiWire) full(s *Server, c completion, _ *Request, t Turn) any {
	var parts []map[string]any
	for _, ch := range s.geminiParts(t) {
		parts = append(parts, ch...)
	}
	return map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"parts": parts, "role": "model"},
		"finishReason": geminiFinish(t), "index": 0}}, "usageMetadata": geminiUsage(t.Usage), "modelVersion": c.model, "responseId": c.id}
}
