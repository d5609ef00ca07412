package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/provider/anthropic"
	"github.com/parleyhq/parley/provider/gemini"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/provider/ollama"
	"github.com/parleyhq/parley/provider/openai"
	"github.com/parleyhq/parley/provider/router"
	"github.com/parleyhq/parley/tracing"
)

// providerConfig is one entry of the config file's "providers" list.
type providerConfig struct {
	Name      string            `yaml:"name"`        // prefix of its model names: "<name>/<model>"
	Kind      string            `yaml:"kind"`        // openai (also GLM, vLLM, Ollama's /v1), anthropic, gemini, ollama (native /api/chat)
	BaseURL   string            `yaml:"base_url"`    // the kind's public endpoint when empty
	APIKey    string            `yaml:"api_key"`     // the key itself, or:
	APIKeyEnv string            `yaml:"api_key_env"` // the environment variable that holds the key
	Models    []string          `yaml:"models"`      // the models offered; none: any name is passed through
	Headers   map[string]string `yaml:"headers"`     // added to every request

	ToolResultsAsText bool `yaml:"tool_results_as_text"` // tool results as XML text in user messages (seed 003 §7)

	SendReasoning   bool  `yaml:"send_reasoning"`    // openai: send reasoning_content back (DeepSeek, GLM)
	LegacyMaxTokens bool  `yaml:"legacy_max_tokens"` // openai: max_tokens instead of max_completion_tokens
	SendToolName    bool  `yaml:"send_tool_name"`    // openai: the name field on tool messages
	DocumentsAsText bool  `yaml:"documents_as_text"` // openai: attached PDFs as their text (no file input)
	MaxTokens       int   `yaml:"max_tokens"`        // anthropic: max_tokens when a request sets none
	ThinkingBudget  int   `yaml:"thinking_budget"`   // anthropic, gemini: extended thinking budget in tokens
	Think           *bool `yaml:"think"`             // ollama: the think flag
}

// The default model of each provider configured from the conventional environment variables.
var defaultModels = map[string]string{"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}

// newRouter builds the model router from the config file's providers, or, when it lists none,
// from the conventional variables (OpenAI, Anthropic, Gemini), or else the offline mock model:
// never the mock beside a real provider, so that a real deployment never answers from it.
func newRouter(c *config, getenv func(string) string, log *slog.Logger) (*router.Router, error) {
	// Each request carries the trace on (traceparent) with tracing on, inside a client span.
	hc := &http.Client{Transport: tracing.Transport(upstreamTransport())}
	provs := c.Providers
	if len(provs) == 0 {
		if c.OpenAIAPIKey != "" || c.OpenAIBaseURL != "" {
			provs = append(provs, providerConfig{Name: "openai", Kind: "openai", BaseURL: c.OpenAIBaseURL, APIKey: c.OpenAIAPIKey})
		}
		if c.AnthropicAPIKey != "" {
			provs = append(provs, providerConfig{Name: "anthropic", Kind: "anthropic", APIKey: c.AnthropicAPIKey})
		}
		if c.GeminiAPIKey != "" {
			provs = append(provs, providerConfig{Name: "gemini", Kind: "gemini", APIKey: c.GeminiAPIKey})
		}
	}
	def := c.Model
	var endpoints []router.Endpoint
	for i, p := range provs {
		e, err := newEndpoint(p, getenv, hc)
		if err != nil {
			return nil, fmt.Errorf("providers[%d]: %w", i, err)
		}
		endpoints = append(endpoints, e)
		if def == "" {
			switch {
			case len(p.Models) > 0:
				def = p.Name + "/" + p.Models[0]
			case defaultModels[p.Kind] != "" && len(c.Providers) == 0:
				def = p.Name + "/" + defaultModels[p.Kind]
			}
		}
		log.Info("model provider configured", "provider", p.Name, "kind", p.Kind, "base_url", p.BaseURL, "models", p.Models)
	}
	if len(endpoints) == 0 {
		if c.Model != "" && c.Model != mockModel && c.Model != "mock/"+mockModel {
			return nil, fmt.Errorf("model %q needs a provider: set OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or PARLEY_OPENAI_BASE_URL, or list providers in the config file", c.Model)
		}
		fake := llmtest.NewServer(llmtest.WithTokenDelay(c.MockTokenDelay), llmtest.WithModel(mockModel))
		endpoints = append(endpoints, router.Endpoint{Name: "mock", Kind: "mock", Models: []string{mockModel},
			Provider: openai.New(openai.Config{BaseURL: "http://mock.invalid/v1", HTTPClient: &http.Client{Transport: tracing.Transport(llmtest.Transport(fake))}})})
		def = "mock/" + mockModel
		log.Warn("no model provider configured: answering with the offline mock model",
			"model", def,
			"hint", "set OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or PARLEY_OPENAI_BASE_URL (Ollama, vLLM, GLM), or list providers in the config file")
	}
	if def == "" {
		return nil, fmt.Errorf("no default model: set --model to provider/model")
	}
	return router.New(router.Config{
		Endpoints: endpoints,
		Default:   def,
		Fallbacks: c.Fallbacks,
		Prices:    c.Prices,
		Retry: router.Retry{Attempts: c.ProviderAttempts, Base: c.ProviderRetryBase, Max: c.ProviderRetryMax,
			MaxWait: c.ProviderMaxWait},
		BreakerFailures: c.BreakerFailures,
		BreakerCooldown: c.BreakerCooldown,
		Log:             log,
	})
}

// mockModel is the name of the offline model.
const mockModel = "mock"

// newEndpoint builds one provider's adapter.
func newEndpoint(p providerConfig, getenv func(string) string, hc *http.Client) (router.Endpoint, error) {
	key := p.APIKey
	if key == "" && p.APIKeyEnv != "" {
		key = getenv(p.APIKeyEnv)
		if key == "" {
			return router.Endpoint{}, fmt.Errorf("provider %q: the variable %s that api_key_env names is empty", p.Name, p.APIKeyEnv)
		}
	}
	e := router.Endpoint{Name: p.Name, Kind: p.Kind, Models: p.Models, ToolResultsAsText: p.ToolResultsAsText}
	switch p.Kind {
	case "openai":
		e.Provider = openai.New(openai.Config{BaseURL: p.BaseURL, APIKey: key, HTTPClient: hc, Headers: p.Headers,
			SendReasoning: p.SendReasoning, LegacyMaxTokens: p.LegacyMaxTokens, SendToolName: p.SendToolName,
			DocumentsAsText: p.DocumentsAsText})
	case "anthropic":
		e.Provider = anthropic.New(anthropic.Config{BaseURL: p.BaseURL, APIKey: key, HTTPClient: hc, Headers: p.Headers,
			Options: anthropic.Options{MaxTokens: p.MaxTokens, ThinkingBudget: p.ThinkingBudget}})
	case "gemini":
		e.Provider = gemini.New(gemini.Config{BaseURL: p.BaseURL, APIKey: key, HTTPClient: hc, Headers: p.Headers,
			Options: gemini.Options{ThinkingBudget: p.ThinkingBudget}})
	case "ollama":
		e.Provider = ollama.New(ollama.Config{BaseURL: p.BaseURL, APIKey: key, HTTPClient: hc, Headers: p.Headers,
			Options: ollama.Options{Think: p.Think}})
	default:
		return e, fmt.Errorf("provider %q: kind must be openai, anthropic, gemini or ollama, not %q", p.Name, p.Kind)
	}
	if slices.Contains(p.Models, "") {
		return e, fmt.Errorf("provider %q: an empty model name", p.Name)
	}
	return e, nil
}

// modelInfos lists the router's models for GET /api/v1/models.
func modelInfos(r *router.Router) []httpapi.ModelInfo {
	var out []httpapi.ModelInfo
	for _, m := range r.Models() {
		mi := httpapi.ModelInfo{ID: m.ID, Provider: m.Provider, Kind: m.Kind, Default: m.Default, Breaker: m.Breaker, Fallbacks: m.Fallbacks}
		if m.Price != nil {
			mi.Price = &httpapi.ModelPrice{Input: m.Price.Input, CachedInput: m.Price.CachedInput, Output: m.Price.Output}
		}
		out = append(out, mi)
	}
	return out
}
