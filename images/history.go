package images

import (
	"encoding/json"
	"net/url"
	"strings"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files"
)

// Verifier tells an image URL Parley signed from any other (artifact.Signer).
type Verifier interface {
	Authentic(purpose, id string, q url.Values) bool
}

// ResultFiles returns the function files.Service uses to give the images of generate_image and
// edit_image results back to the model on later model calls (files.Service.SetResultImages).
//
// A tool result stays text in the stored history (OpenAI allows only text in tool messages); the
// images it names are found in its JSON. Only a stored image whose URL carries Parley's
// signature for that file id counts (expired or not): a history a client supplies (the
// stateless OpenAI-compatible API) cannot name another user's file and have it read. An image
// of degraded mode, inline in the result, is taken out of the text the model is sent (base64
// as text would cost a token per few bytes) and shown as an image part instead.
func ResultFiles(v Verifier) func(m parley.Message) files.ResultImages {
	return func(m parley.Message) files.ResultImages {
		var out files.ResultImages
		if m.Role != parley.RoleTool || (m.Name != "generate_image" && m.Name != "edit_image") {
			return out
		}
		text := strings.TrimSpace(m.Content.String())
		if !strings.HasPrefix(text, "{") {
			return out
		}
		var r Result
		if json.Unmarshal([]byte(text), &r) != nil {
			return out
		}
		inline := false
		for i, im := range r.Images {
			if im.Degraded && im.B64JSON != "" {
				if inlineTypes[im.MediaType] {
					out.Inline = append(out.Inline, "data:"+im.MediaType+";base64,"+im.B64JSON)
				}
				r.Images[i].B64JSON = ""
				inline = true
				continue
			}
			if im.FileID == "" || im.URL == "" {
				continue
			}
			u, err := url.Parse(im.URL)
			if err != nil || u.Path != "/api/v1/images/"+url.PathEscape(im.FileID) || !v.Authentic(Purpose, im.FileID, u.Query()) {
				continue
			}
			out.FileIDs = append(out.FileIDs, im.FileID)
		}
		if inline {
			r.Note += " (The inline image data is left out here; the images are shown to you after the tool results.)"
			b, _ := json.Marshal(r)
			c := parley.Text(string(b))
			out.Content = &c
		}
		return out
	}
}

// inlineTypes are the image types a degraded result may show the model inline.
var inlineTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/webp": true, "image/gif": true}
