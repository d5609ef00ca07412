package images

import (
	"encoding/json"
	"net/url"
	"strings"

	parley "github.com/parleyhq/parley"
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
// stateless OpenAI-compatible API) cannot name another user's file and have it read.
func ResultFiles(v Verifier) func(m parley.Message) []string {
	return func(m parley.Message) []string {
		if m.Role != parley.RoleTool || (m.Name != "generate_image" && m.Name != "edit_image") {
			return nil
		}
		text := strings.TrimSpace(m.Content.String())
		if !strings.HasPrefix(text, "{") {
			return nil
		}
		var r Result
		if json.Unmarshal([]byte(text), &r) != nil {
			return nil
		}
		var ids []string
		for _, im := range r.Images {
			if im.FileID == "" || im.URL == "" {
				continue
			}
			u, err := url.Parse(im.URL)
			if err != nil || u.Path != "/api/v1/images/"+url.PathEscape(im.FileID) || !v.Authentic(Purpose, im.FileID, u.Query()) {
				continue
			}
			ids = append(ids, im.FileID)
		}
		return ids
	}
}
