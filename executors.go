package parley

import (
	"context"
	"time"
)

// ArtifactType is the kind of an artifact: what it holds and how a client shows it.
type ArtifactType string

// The artifact types (seed 003 §3).
const (
	ArtifactReact    ArtifactType = "react"    // a React component (JSX/TSX), compiled and run in a sandbox
	ArtifactHTML     ArtifactType = "html"     // an HTML fragment or page, run in a sandbox
	ArtifactSVG      ArtifactType = "svg"      // an SVG image, cleaned of scripts and external references
	ArtifactCode     ArtifactType = "code"     // source code in Language, shown, never run
	ArtifactMermaid  ArtifactType = "mermaid"  // a Mermaid diagram's source
	ArtifactMarkdown ArtifactType = "markdown" // a Markdown document
)

// ArtifactTypes lists every artifact type.
var ArtifactTypes = []ArtifactType{ArtifactReact, ArtifactHTML, ArtifactSVG, ArtifactCode, ArtifactMermaid, ArtifactMarkdown}

// Artifact is one version of an artifact: a document a model made in a session. Each update of an
// artifact is a new version; versions count from 1 and older ones are kept.
type Artifact struct {
	ID        string       `json:"id"`
	Version   int          `json:"version"`
	SessionID string       `json:"session_id"`
	RunID     string       `json:"run_id,omitempty"`
	Type      ArtifactType `json:"type"`
	Title     string       `json:"title"`
	Language  string       `json:"language,omitempty"` // code artifacts: the language of Content
	Content   string       `json:"content"`
	CreatedAt time.Time    `json:"created_at"`
}

// ArtifactStore keeps artifacts and their versions. store/sqlite and store/postgres implement it.
type ArtifactStore interface {
	// AddArtifactVersion stores a as the next version of artifact a.ID (version 1 for a new id)
	// and sets a.Version. A new version must keep the session of the first; ErrNotFound when the
	// session does not exist, or when a.ID belongs to another session.
	AddArtifactVersion(ctx context.Context, a *Artifact) error
	// GetArtifact returns the version of the artifact (0: the latest), or ErrNotFound.
	GetArtifact(ctx context.Context, id string, version int) (*Artifact, error)
	// ListArtifacts returns the latest version of each artifact of the session, oldest artifact
	// first.
	ListArtifacts(ctx context.Context, sessionID string) ([]Artifact, error)
}

// SearchCost is the cost of one call of a web search backend (seed 003 §6's usage log).
type SearchCost struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"` // the user the call was made for
	SessionID string    `json:"session_id,omitempty"`
	RunID     string    `json:"run_id,omitempty"`
	Backend   string    `json:"backend"` // searxng, tavily or brave
	Query     string    `json:"query"`   // the query sent (after any rewrite)
	Results   int       `json:"results"`
	Credits   float64   `json:"credits"` // the backend's own unit (Tavily credits, Brave requests)
	Dollars   float64   `json:"dollars"`
	CreatedAt time.Time `json:"created_at"`
}

// SearchUsage totals an owner's web search calls, over all backends and per backend.
type SearchUsage struct {
	Calls     int64                   `json:"calls"`
	Credits   float64                 `json:"credits"`
	Dollars   float64                 `json:"dollars"`
	ByBackend map[string]BackendUsage `json:"by_backend,omitempty"`
}

// BackendUsage totals the calls of one search backend.
type BackendUsage struct {
	Calls   int64   `json:"calls"`
	Credits float64 `json:"credits"`
	Dollars float64 `json:"dollars"`
}

// SearchCostStore keeps the cost records of web searches. store/sqlite and store/postgres
// implement it.
type SearchCostStore interface {
	// AddSearchCost stores c (ID and CreatedAt set).
	AddSearchCost(ctx context.Context, c *SearchCost) error
	// OwnerSearchUsage totals owner's search costs.
	OwnerSearchUsage(ctx context.Context, owner string) (SearchUsage, error)
}

// WebSearchInfo is the payload of a web_search event: the query run and the sources found, for a
// client to show as cards.
type WebSearchInfo struct {
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Query      string         `json:"query"`
	Original   string         `json:"original_query,omitempty"` // the model's query, when it was rewritten
	Backend    string         `json:"backend"`
	Sources    []SearchSource `json:"sources"`
}

// SearchSource is one result of a web search.
type SearchSource struct {
	Title     string `json:"title"`
	URL       string `json:"url"`
	Snippet   string `json:"snippet"`
	Published string `json:"published,omitempty"`
}

// ImageInfo is the payload of an image event: one image generate_image or edit_image made.
type ImageInfo struct {
	ToolCallID string `json:"tool_call_id,omitempty"`
	Tool       string `json:"tool"`
	// FileID and URL (signed, expiring; GET needs no API key) of the stored image; empty in
	// degraded mode.
	FileID    string `json:"file_id,omitempty"`
	URL       string `json:"url,omitempty"`
	MediaType string `json:"media_type"`
	// Degraded: the image could not be stored; Data holds it as base64.
	Degraded bool   `json:"degraded,omitempty"`
	Data     string `json:"data,omitempty"`
	Prompt   string `json:"prompt"`
}
