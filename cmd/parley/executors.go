package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/artifact"
	"github.com/parleyhq/parley/fetchurl"
	"github.com/parleyhq/parley/files"
	"github.com/parleyhq/parley/images"
	"github.com/parleyhq/parley/internal/ask"
	"github.com/parleyhq/parley/tools"
	"github.com/parleyhq/parley/websearch"
)

// executorConfig is the configuration of the executor tools (issue 21): artifacts, web search and
// fetch_url. Each is off until configured.
type executorConfig struct {
	Artifacts         bool
	ArtifactModel     string
	ArtifactURLSecret string
	ArtifactURLTTL    time.Duration

	SearchBackend          string
	SearXNGURL             string
	TavilyAPIKey           string
	TavilyBaseURL          string
	BraveAPIKey            string
	BraveBaseURL           string
	SearchRewriteModel     string
	SearchAttempts         int
	SearchRetryBase        time.Duration
	SearchRetryMax         time.Duration
	SearchDollarsPerCredit float64

	FetchURL      bool
	FetchMaxBytes int64
	FetchTimeout  time.Duration

	ImageBackend   string
	ImageModel     string
	ImageAPIKeyEnv string
	ImageBaseURL   string
	ImageTimeout   time.Duration
	ImageURLTTL    time.Duration
}

func executorFlags(fs *flag.FlagSet, c *executorConfig) {
	fs.BoolVar(&c.Artifacts, "artifacts", false, "offer the create_artifact and update_artifact tools (on too when --artifact-model is set)")
	fs.StringVar(&c.ArtifactModel, "artifact-model", "", "model (provider/model) that writes artifacts from the instructions a model gives create_artifact/update_artifact; empty: the calling model writes the content itself")
	fs.StringVar(&c.ArtifactURLSecret, "artifact-url-secret", "", "secret (at least 32 characters) that signs the URLs of artifact pages; instances sharing a database need the same one; empty: a random one per process (URLs do not survive a restart)")
	fs.DurationVar(&c.ArtifactURLTTL, "artifact-url-ttl", time.Hour, "how long a signed artifact page URL (render_url) is valid")
	fs.StringVar(&c.SearchBackend, "search-backend", "", "web search backend of the web_search tool: searxng, tavily or brave (empty: no web_search)")
	fs.StringVar(&c.SearXNGURL, "searxng-url", "", "base URL of the SearXNG instance (its settings.yml must list json in search.formats)")
	fs.StringVar(&c.TavilyAPIKey, "tavily-api-key", "", "Tavily API key (also TAVILY_API_KEY)")
	fs.StringVar(&c.TavilyBaseURL, "tavily-base-url", "https://api.tavily.com", "Tavily API endpoint")
	fs.StringVar(&c.BraveAPIKey, "brave-api-key", "", "Brave Search API subscription token (also BRAVE_API_KEY)")
	fs.StringVar(&c.BraveBaseURL, "brave-base-url", "https://api.search.brave.com", "Brave Search API endpoint")
	fs.StringVar(&c.SearchRewriteModel, "search-rewrite-model", "", "small model (provider/model) that rewrites web_search queries; a failed rewrite sends the query as it is (empty: no rewrite)")
	fs.IntVar(&c.SearchAttempts, "search-attempts", 3, "tries of one search on 429 and 5xx answers, the first included")
	fs.DurationVar(&c.SearchRetryBase, "search-retry-base", 500*time.Millisecond, "first backoff between search tries; it doubles per try, half of it random; a Retry-After replaces it")
	fs.DurationVar(&c.SearchRetryMax, "search-retry-max", 10*time.Second, "longest backoff between search tries; a Retry-After longer than this fails the search at once")
	fs.Float64Var(&c.SearchDollarsPerCredit, "search-dollars-per-credit", -1, "price of one unit of the backend (a Tavily credit, a Brave request) for the cost records; default 0.008 for tavily, 0.005 for brave, 0 for searxng")
	fs.BoolVar(&c.FetchURL, "fetch-url", false, "offer the fetch_url tool: reads one public web page as text (loopback, private, link-local and metadata addresses are refused)")
	fs.Int64Var(&c.FetchMaxBytes, "fetch-max-bytes", 2<<20, "largest page fetch_url reads; a longer one is cut")
	fs.DurationVar(&c.FetchTimeout, "fetch-timeout", 20*time.Second, "time limit of one fetch_url page, redirects included")
	fs.StringVar(&c.ImageBackend, "image-backend", "", "image API of the generate_image and edit_image tools: openai (images API), gemini (image output) or openrouter (chat completions with image output); empty: no image tools")
	fs.StringVar(&c.ImageModel, "image-model", "", "model of the image API (e.g. gpt-image-1, gemini-2.5-flash-image, google/gemini-2.5-flash-image)")
	fs.StringVar(&c.ImageAPIKeyEnv, "image-api-key-env", "", "name of the environment variable holding the image API's key (default OPENAI_API_KEY, GEMINI_API_KEY or OPENROUTER_API_KEY by backend)")
	fs.StringVar(&c.ImageBaseURL, "image-base-url", "", "endpoint of the image API (default https://api.openai.com/v1, https://generativelanguage.googleapis.com or https://openrouter.ai/api/v1 by backend)")
	fs.DurationVar(&c.ImageTimeout, "image-timeout", images.DefaultTimeout, "time limit of one call of the image API")
	fs.DurationVar(&c.ImageURLTTL, "image-url-ttl", images.DefaultURLTTL, "how long the signed URL of a generated image is valid (signed with --artifact-url-secret)")
}

func (c *executorConfig) validate() error {
	var errs []error
	switch c.SearchBackend {
	case "":
	case "searxng":
		if u, err := url.Parse(c.SearXNGURL); c.SearXNGURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, errors.New("search-backend searxng needs --searxng-url, an http(s) URL"))
		}
	case "tavily":
		if c.TavilyAPIKey == "" {
			errs = append(errs, errors.New("search-backend tavily needs --tavily-api-key (or TAVILY_API_KEY)"))
		}
	case "brave":
		if c.BraveAPIKey == "" {
			errs = append(errs, errors.New("search-backend brave needs --brave-api-key (or BRAVE_API_KEY)"))
		}
	default:
		errs = append(errs, fmt.Errorf("search-backend: %q is not searxng, tavily or brave", c.SearchBackend))
	}
	if c.SearchAttempts < 1 {
		errs = append(errs, errors.New("search-attempts must be at least 1"))
	}
	if c.ArtifactURLSecret != "" && len(c.ArtifactURLSecret) < 32 {
		errs = append(errs, errors.New("artifact-url-secret must be at least 32 characters"))
	}
	if c.ArtifactURLTTL <= 0 {
		errs = append(errs, errors.New("artifact-url-ttl must be positive"))
	}
	switch c.ImageBackend {
	case "":
	case "openai", "gemini", "openrouter":
		if c.ImageModel == "" {
			errs = append(errs, fmt.Errorf("image-backend %s needs --image-model", c.ImageBackend))
		}
	default:
		errs = append(errs, fmt.Errorf("image-backend: %q is not openai, gemini or openrouter", c.ImageBackend))
	}
	if c.ImageTimeout <= 0 || c.ImageURLTTL <= 0 {
		errs = append(errs, errors.New("image-timeout and image-url-ttl must be positive"))
	}
	if c.FetchMaxBytes <= 0 || c.FetchTimeout <= 0 {
		errs = append(errs, errors.New("fetch-max-bytes and fetch-timeout must be positive"))
	}
	return errors.Join(errs...)
}

// executors registers the executor tools that are configured and returns what the API needs
// to serve artifacts and search costs.
type executors struct {
	artifacts parley.ArtifactStore
	signer    *artifact.Signer
	costs     parley.SearchCostStore
}

func registerExecutors(c *executorConfig, reg *tools.Registry, st parley.Store, resolve ask.Resolver, fileSvc *files.Service, getenv func(string) string, log *slog.Logger) (*executors, error) {
	x := &executors{}
	as, _ := st.(parley.ArtifactStore)
	if as != nil {
		// The API serves stored artifacts even while the tools are off.
		key := []byte(c.ArtifactURLSecret)
		if len(key) == 0 {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return nil, err
			}
			key = []byte(hex.EncodeToString(b))
		}
		x.artifacts, x.signer = as, &artifact.Signer{Key: key, TTL: c.ArtifactURLTTL}
	}
	if c.Artifacts || c.ArtifactModel != "" {
		if as == nil {
			return nil, errors.New("artifacts: the store does not keep artifacts")
		}
		if c.ArtifactModel != "" {
			if _, _, err := resolve(c.ArtifactModel); err != nil {
				return nil, fmt.Errorf("artifact-model: %w", err)
			}
		}
		ac := artifact.Config{Store: as, Model: ask.Model{Resolve: resolve, Name: c.ArtifactModel}, Log: log}
		if fs, ok := st.(parley.FileStore); ok {
			ac.InLineage = fs.InLineage
		}
		for _, t := range artifact.Tools(ac) {
			if err := reg.Register(t); err != nil {
				return nil, err
			}
		}
	}
	x.costs, _ = st.(parley.SearchCostStore)
	if c.SearchBackend != "" {
		var (
			b     websearch.Backend
			price float64
		)
		switch c.SearchBackend {
		case "searxng":
			b = &websearch.SearXNG{BaseURL: c.SearXNGURL}
		case "tavily":
			b, price = &websearch.Tavily{BaseURL: c.TavilyBaseURL, APIKey: c.TavilyAPIKey}, 0.008
		case "brave":
			b, price = &websearch.Brave{BaseURL: c.BraveBaseURL, APIKey: c.BraveAPIKey}, 0.005
		}
		if c.SearchDollarsPerCredit >= 0 {
			price = c.SearchDollarsPerCredit
		}
		if c.SearchRewriteModel != "" {
			if _, _, err := resolve(c.SearchRewriteModel); err != nil {
				return nil, fmt.Errorf("search-rewrite-model: %w", err)
			}
		}
		if err := reg.Register(websearch.Tool(websearch.Config{Backend: b, Costs: x.costs, DollarsPerCredit: price, Log: log,
			Rewrite: ask.Model{Resolve: resolve, Name: c.SearchRewriteModel},
			Retry:   websearch.Retry{Attempts: c.SearchAttempts, Base: c.SearchRetryBase, Max: c.SearchRetryMax}})); err != nil {
			return nil, err
		}
	}
	if c.FetchURL {
		if err := reg.Register(fetchurl.Tool(fetchurl.New(fetchurl.Config{MaxBytes: c.FetchMaxBytes, Timeout: c.FetchTimeout}))); err != nil {
			return nil, err
		}
	}
	if x.signer != nil && fileSvc != nil {
		// Images the image tools stored go back to the model on later calls.
		fileSvc.SetResultImages(images.ResultFiles(x.signer))
	}
	if c.ImageBackend != "" {
		if x.signer == nil || fileSvc == nil {
			return nil, errors.New("image-backend: the image tools need the files service and a store that keeps artifacts (for the URL signer)")
		}
		b, err := imageBackend(c, getenv)
		if err != nil {
			return nil, err
		}
		for _, t := range images.Tools(images.Config{Backend: b, Files: fileSvc, Signer: x.signer, Timeout: c.ImageTimeout, URLTTL: c.ImageURLTTL, Log: log}) {
			if err := reg.Register(t); err != nil {
				return nil, err
			}
		}
	}
	var on []string
	for _, n := range []struct {
		name string
		on   bool
	}{{"artifacts", c.Artifacts || c.ArtifactModel != ""}, {"web_search:" + c.SearchBackend, c.SearchBackend != ""}, {"fetch_url", c.FetchURL}, {"images:" + c.ImageBackend, c.ImageBackend != ""}} {
		if n.on {
			on = append(on, n.name)
		}
	}
	if len(on) > 0 {
		log.Info("executor tools", "on", strings.Join(on, ","))
	}
	return x, nil
}

// imageBackend is the configured image API.
func imageBackend(c *executorConfig, getenv func(string) string) (images.Backend, error) {
	env := c.ImageAPIKeyEnv
	if env == "" {
		env = map[string]string{"openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY", "openrouter": "OPENROUTER_API_KEY"}[c.ImageBackend]
	}
	key := getenv(env)
	if key == "" {
		return nil, fmt.Errorf("image-backend %s: the environment variable %s (--image-api-key-env) holds no API key", c.ImageBackend, env)
	}
	switch c.ImageBackend {
	case "openai":
		// gpt-image models always answer base64 and refuse response_format.
		return &images.OpenAI{BaseURL: c.ImageBaseURL, APIKey: key, Model: c.ImageModel, NoResponseFormat: strings.HasPrefix(c.ImageModel, "gpt-image")}, nil
	case "gemini":
		return &images.Gemini{BaseURL: c.ImageBaseURL, APIKey: key, Model: c.ImageModel}, nil
	default:
		return &images.OpenRouter{BaseURL: c.ImageBaseURL, APIKey: key, Model: c.ImageModel}, nil
	}
}
