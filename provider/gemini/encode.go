package gemini

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/convert"
)

// Options are the per-provider choices of the Gemini API.
type Options struct {
	// ThinkingBudget sets thinkingConfig.thinkingBudget when above 0 (-1 lets the model decide).
	// With any budget other than 0, thought summaries are asked for and arrive as reasoning.
	ThinkingBudget int
}

// SkipSignature is the placeholder Gemini's documentation gives for a function call of the
// current turn that has no thought signature, e.g. one made by another provider: without it,
// the thinking models refuse the request.
const SkipSignature = "skip_thought_signature_validator"

// EncodeRequest returns the generateContent request body for req (the model goes in the URL).
// System messages become systemInstruction; assistant messages are "model" turns whose tool
// calls are functionCall parts with their thought signatures; tool results are functionResponse
// parts, those of one step in one user turn. Errors are *parley.Error with code ECInvalid.
func EncodeRequest(req *parley.ChatRequest, opts Options) ([]byte, error) {
	if err := convert.CheckRequest(req); err != nil {
		return nil, err
	}
	var w wireRequest
	if sys := convert.SystemText(req.Messages); sys != "" {
		w.SystemInstruction = &wireContent{Parts: []wirePart{{Text: sys}}}
	}
	names := convert.CallNames(req.Messages)
	turn := convert.TurnStart(req.Messages)
	for i, m := range req.Messages {
		if m.Role == parley.RoleSystem {
			continue
		}
		role, parts, err := encodeMessage(m, names, i > turn)
		if err != nil {
			return nil, parley.Errorf(parley.ECInvalid, "message %d: %v", i, err)
		}
		if len(parts) == 0 {
			continue
		}
		if n := len(w.Contents); n > 0 && w.Contents[n-1].Role == role {
			w.Contents[n-1].Parts = append(w.Contents[n-1].Parts, parts...)
			continue
		}
		w.Contents = append(w.Contents, wireContent{Role: role, Parts: parts})
	}
	if len(w.Contents) == 0 {
		return nil, parley.Errorf(parley.ECInvalid, "no messages with content")
	}
	var decls []wireFunctionDecl
	for _, t := range req.Tools {
		schema, err := convert.Schema(t)
		if err != nil {
			return nil, err
		}
		decls = append(decls, wireFunctionDecl{Name: t.Name, Description: t.Description, ParametersJSONSchema: schema})
	}
	if len(decls) > 0 {
		w.Tools = []wireTool{{FunctionDeclarations: decls}}
		mode := map[string]string{"auto": "AUTO", "required": "ANY", "none": "NONE"}[req.ToolChoice]
		if mode != "" {
			w.ToolConfig = &wireToolConfig{FunctionCallingConfig: wireFunctionCalling{Mode: mode}}
		}
	}
	gc := wireGenerationConfig{Temperature: req.Temperature, MaxOutputTokens: req.MaxTokens}
	if opts.ThinkingBudget != 0 {
		gc.ThinkingConfig = &wireThinkingConfig{IncludeThoughts: true, ThinkingBudget: opts.ThinkingBudget}
	}
	if gc != (wireGenerationConfig{}) {
		w.GenerationConfig = &gc
	}
	b, err := convert.Marshal(w)
	if err != nil {
		return nil, parley.WrapError(parley.ECInvalid, err, "cannot encode request")
	}
	return b, nil
}

// encodeMessage returns the Gemini role and parts of one OpenAI-format message. inTurn tells
// whether the message belongs to the current turn, where function calls need a thought signature.
func encodeMessage(m parley.Message, names map[string]string, inTurn bool) (string, []wirePart, error) {
	switch m.Role {
	case parley.RoleUser:
		parts, err := contentParts(m.Content)
		return "user", parts, err
	case parley.RoleTool:
		name := names[m.ToolCallID]
		if name == "" {
			name = m.Name
		}
		if name == "" {
			return "", nil, fmt.Errorf("tool result %q answers no tool call", m.ToolCallID)
		}
		resp := map[string]string{"output": m.Content.String()}
		parts := []wirePart{{FunctionResponse: &wireFunctionResponse{Name: name, Response: resp}}}
		if m.Content.IsParts() { // images of a tool result follow its response
			for i, p := range m.Content.Parts() {
				if p.Type != "image_url" {
					continue
				}
				img, err := imagePart(p, i)
				if err != nil {
					return "", nil, err
				}
				parts = append(parts, img)
			}
		}
		return "user", parts, nil
	case parley.RoleAssistant:
		parts, err := contentParts(m.Content)
		if err != nil {
			return "", nil, err
		}
		signed := false
		for _, c := range m.ToolCalls {
			if c.ThoughtSignature() != "" {
				signed = true
			}
		}
		for i, c := range m.ToolCalls {
			p := wirePart{FunctionCall: &wireFunctionCall{Name: c.Function.Name, Args: convert.ArgsObject(c.Function.Arguments)},
				ThoughtSignature: c.ThoughtSignature()}
			if i == 0 && !signed && inTurn {
				p.ThoughtSignature = SkipSignature
			}
			parts = append(parts, p)
		}
		return "model", parts, nil
	}
	return "", nil, fmt.Errorf("unknown role %q", m.Role)
}

// contentParts maps content to text and image parts, leaving out empty text.
func contentParts(c parley.Content) ([]wirePart, error) {
	if !c.IsParts() {
		if t := c.String(); t != "" {
			return []wirePart{{Text: t}}, nil
		}
		return nil, nil
	}
	var parts []wirePart
	for i, p := range c.Parts() {
		switch p.Type {
		case "text":
			if p.Text != "" {
				parts = append(parts, wirePart{Text: p.Text})
			}
		case "image_url":
			img, err := imagePart(p, i)
			if err != nil {
				return nil, err
			}
			parts = append(parts, img)
		case "file":
			if p.File == nil {
				return nil, fmt.Errorf("content part %d: file needs a file object", i)
			}
			d, isData, err := convert.ParseDataURL(p.File.FileData)
			if err != nil {
				return nil, fmt.Errorf("content part %d: %v", i, err)
			}
			if !isData {
				parts = append(parts, wirePart{Text: convert.DocumentText(p.File)})
				continue
			}
			// A document inline: Gemini reads PDFs (and other types) as inline data.
			parts = append(parts, wirePart{InlineData: &wireBlob{MimeType: d.MediaType, Data: d.Data}})
		default:
			return nil, fmt.Errorf("content part %d: unknown type %q", i, p.Type)
		}
	}
	return parts, nil
}

// imageTypes are the media types Gemini reads, by file extension, for images given by URL.
var imageTypes = map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
	".webp": "image/webp", ".heic": "image/heic", ".heif": "image/heif", ".gif": "image/gif"}

// imagePart maps an image to inlineData (a data: URL) or fileData (a URL, whose media type
// Gemini requires and the file extension tells).
func imagePart(p parley.Part, i int) (wirePart, error) {
	if p.ImageURL == nil || p.ImageURL.URL == "" {
		return wirePart{}, fmt.Errorf("content part %d: image_url needs a url", i)
	}
	d, isData, err := convert.ParseDataURL(p.ImageURL.URL)
	if err != nil {
		return wirePart{}, fmt.Errorf("content part %d: %v", i, err)
	}
	if isData {
		return wirePart{InlineData: &wireBlob{MimeType: d.MediaType, Data: d.Data}}, nil
	}
	u := p.ImageURL.URL
	if q := strings.IndexAny(u, "?#"); q >= 0 {
		u = u[:q]
	}
	mt := imageTypes[strings.ToLower(path.Ext(u))]
	if mt == "" {
		return wirePart{}, fmt.Errorf("content part %d: Gemini needs the image inline (a data: URL) or a URL ending in a known image extension", i)
	}
	return wirePart{FileData: &wireFileData{MimeType: mt, FileURI: p.ImageURL.URL}}, nil
}

// The request wire format. Field order is the order of the encoded JSON.
type wireRequest struct {
	Contents          []wireContent         `json:"contents"`
	SystemInstruction *wireContent          `json:"systemInstruction,omitempty"`
	Tools             []wireTool            `json:"tools,omitempty"`
	ToolConfig        *wireToolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *wireGenerationConfig `json:"generationConfig,omitempty"`
}

type wireContent struct {
	Role  string     `json:"role,omitempty"`
	Parts []wirePart `json:"parts"`
}

// wirePart is a part of any kind; only the fields of its kind are set.
type wirePart struct {
	Text             string                `json:"text,omitempty"`
	Thought          bool                  `json:"thought,omitempty"`
	InlineData       *wireBlob             `json:"inlineData,omitempty"`
	FileData         *wireFileData         `json:"fileData,omitempty"`
	FunctionCall     *wireFunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *wireFunctionResponse `json:"functionResponse,omitempty"`
	ThoughtSignature string                `json:"thoughtSignature,omitempty"`
}

type wireBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type wireFileData struct {
	MimeType string `json:"mimeType"`
	FileURI  string `json:"fileUri"`
}

type wireFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type wireFunctionResponse struct {
	ID       string            `json:"id,omitempty"`
	Name     string            `json:"name"`
	Response map[string]string `json:"response"`
}

type wireTool struct {
	FunctionDeclarations []wireFunctionDecl `json:"functionDeclarations"`
}

type wireFunctionDecl struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
}

type wireToolConfig struct {
	FunctionCallingConfig wireFunctionCalling `json:"functionCallingConfig"`
}

type wireFunctionCalling struct {
	Mode string `json:"mode"`
}

type wireGenerationConfig struct {
	Temperature     *float64            `json:"temperature,omitempty"`
	MaxOutputTokens int                 `json:"maxOutputTokens,omitempty"`
	ThinkingConfig  *wireThinkingConfig `json:"thinkingConfig,omitempty"`
}

type wireThinkingConfig struct {
	IncludeThoughts bool `json:"includeThoughts"`
	ThinkingBudget  int  `json:"thinkingBudget"`
}
