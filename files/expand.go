package files

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
)

// Expand returns msgs with every file reference (a "file" part with a file_id and no data)
// replaced by what the model is sent of the file, read from the blob store:
//
//   - an image: a label naming the file, then an image_url part with the bytes as a data: URL;
//   - a text file (text, Markdown, CSV, JSON, source code): a text part with its name and its text,
//     cut to the text budget with a note saying so;
//   - a PDF: a label, then a file part with the document as a data: URL (file_data) and its
//     extracted text (FileRef.Text) for the adapters whose provider takes no documents; a PDF
//     over the inline limit is sent as its text only;
//   - anything else, or a file since deleted: a text part saying so.
//
// The messages given are not changed; those without references are returned as they are.
func (s *Service) Expand(ctx context.Context, msgs []parley.Message) ([]parley.Message, error) {
	out := msgs
	copied := false
	for i, m := range msgs {
		if !hasRef(m.Content) {
			continue
		}
		if !copied {
			out = append([]parley.Message(nil), msgs...)
			copied = true
		}
		var parts []parley.Part
		for _, p := range m.Content.Parts() {
			if p.Type != "file" || p.File == nil || p.File.FileID == "" || p.File.FileData != "" {
				parts = append(parts, p)
				continue
			}
			ps, err := s.expandOne(ctx, p.File)
			if err != nil {
				return nil, err
			}
			parts = append(parts, ps...)
		}
		out[i].Content = parley.Parts(parts...)
	}
	if s.resultImages != nil {
		return s.expandResultImages(ctx, out)
	}
	return out, nil
}

// MaxResultImages bounds the images of tool results given back to the model in one request.
const MaxResultImages = 8

// expandResultImages inserts, after each group of consecutive tool messages whose results name
// image files (generate_image, edit_image), a user message showing the model those images. The
// tool messages stay text, as OpenAI requires of tool messages; the stored history is not
// changed.
func (s *Service) expandResultImages(ctx context.Context, msgs []parley.Message) ([]parley.Message, error) {
	type image struct{ fileID, dataURL string }
	var (
		out     []parley.Message
		pending []image
	)
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		parts := []parley.Part{textPart("[The images the tool calls above made, shown to you by the system; the user sees them already.]")}
		for _, im := range pending {
			if im.dataURL != "" {
				parts = append(parts, textPart("An image that could not be stored:"), parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: im.dataURL}})
				continue
			}
			ps, err := s.expandOne(ctx, &parley.FileRef{FileID: im.fileID, Filename: im.fileID})
			if err != nil {
				return err
			}
			parts = append(parts, ps...)
		}
		out = append(out, parley.Message{Role: parley.RoleUser, Content: parley.Parts(parts...)})
		pending = nil
		return nil
	}
	// Only the most recent MaxResultImages images are shown: a long conversation full of images
	// must not grow every request without bound.
	// found is made at the first tool result that names an image: most model calls have none.
	var found []ResultImages
	total := 0
	for i, m := range msgs {
		if m.Role != parley.RoleTool {
			continue
		}
		r := s.resultImages(m)
		if r.count() == 0 && r.Content == nil {
			continue
		}
		if found == nil {
			found = make([]ResultImages, len(msgs))
		}
		found[i] = r
		total += r.count()
	}
	if total == 0 {
		return msgs, nil
	}
	skip := max(total-MaxResultImages, 0)
	for i, m := range msgs {
		if m.Role != parley.RoleTool {
			if err := flush(); err != nil {
				return nil, err
			}
		} else {
			r := found[i]
			if r.Content != nil {
				m.Content = *r.Content
			}
			for _, id := range r.FileIDs {
				if skip > 0 {
					skip--
					continue
				}
				pending = append(pending, image{fileID: id})
			}
			for _, u := range r.Inline {
				if skip > 0 {
					skip--
					continue
				}
				pending = append(pending, image{dataURL: u})
			}
		}
		out = append(out, m)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

func hasRef(c parley.Content) bool {
	for _, p := range c.Parts() {
		if p.Type == "file" && p.File != nil && p.File.FileID != "" && p.File.FileData == "" {
			return true
		}
	}
	return false
}

func textPart(s string) parley.Part { return parley.Part{Type: "text", Text: s} }

func (s *Service) expandOne(ctx context.Context, ref *parley.FileRef) ([]parley.Part, error) {
	f, err := s.cfg.Store.GetFile(ctx, ref.FileID)
	if parley.CodeOf(err) == parley.ECNotFound {
		return []parley.Part{textPart(fmt.Sprintf("[Attached file %q: it has been deleted.]", ref.Filename))}, nil
	}
	if err != nil {
		return nil, err
	}
	label := fmt.Sprintf("Attached file %q (%s, %d bytes):", f.Name, BaseType(f.MediaType), f.Size)
	switch {
	case IsImage(f.MediaType) && f.Size <= s.cfg.MaxInline:
		data, err := s.readAll(ctx, f)
		if err != nil {
			return nil, err
		}
		url := "data:" + BaseType(f.MediaType) + ";base64," + base64.StdEncoding.EncodeToString(data)
		return []parley.Part{textPart(label), {Type: "image_url", ImageURL: &parley.ImageURL{URL: url}}}, nil
	case IsText(f.MediaType):
		text, err := s.readText(ctx, f)
		if err != nil {
			return nil, err
		}
		return []parley.Part{textPart(label + "\n" + text)}, nil
	case IsPDF(f.MediaType):
		text, err := s.pdfText(ctx, f)
		if err != nil {
			return nil, err
		}
		if f.Size > s.cfg.MaxInline {
			return []parley.Part{textPart(label + "\n" + text)}, nil
		}
		data, err := s.readAll(ctx, f)
		if err != nil {
			return nil, err
		}
		return []parley.Part{textPart(label), {Type: "file", File: &parley.FileRef{
			Filename: f.Name, FileData: "data:application/pdf;base64," + base64.StdEncoding.EncodeToString(data), Text: text,
		}}}, nil
	default:
		return []parley.Part{textPart(label + " its content cannot be given to the model.")}, nil
	}
}

func (s *Service) readAll(ctx context.Context, f *parley.File) ([]byte, error) {
	rd, err := s.Open(ctx, f)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(io.LimitReader(rd, s.cfg.MaxInline))
}

// readText reads up to the text budget of a text file, cut on a character boundary, with a note
// when there was more.
func (s *Service) readText(ctx context.Context, f *parley.File) (string, error) {
	rd, err := s.Open(ctx, f)
	if err != nil {
		return "", err
	}
	defer rd.Close()
	buf, err := io.ReadAll(io.LimitReader(rd, int64(s.cfg.TextBudget)+1))
	if err != nil {
		return "", err
	}
	buf = bytes.ReplaceAll(buf, []byte{0}, nil)
	if len(buf) <= s.cfg.TextBudget {
		return strings.ToValidUTF8(string(buf), "\uFFFD"), nil
	}
	text := cutUTF8(string(buf), s.cfg.TextBudget)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return text + fmt.Sprintf("\n[The file was cut: only its first %d of %d bytes are shown.]", len(text), f.Size), nil
}
