package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/tools"
	"github.com/parleyhq/parley/tools/mcp"
)

// mcpServers merges the servers of --mcp-config's file and of the config file's mcpServers key;
// a name in both is an error.
func (c *config) mcpServers() (map[string]mcp.ServerConfig, error) {
	out := map[string]mcp.ServerConfig{}
	for name, sc := range c.MCPServers {
		if err := sc.Validate(name); err != nil {
			return nil, fmt.Errorf("config file: mcpServers: %w", err)
		}
		out[name] = sc
	}
	if c.MCPConfig == "" {
		return out, nil
	}
	data, err := os.ReadFile(c.MCPConfig)
	if err != nil {
		return nil, fmt.Errorf("mcp-config: %w", err)
	}
	servers, err := mcp.ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("mcp-config %s: %w", c.MCPConfig, err)
	}
	for name, sc := range servers {
		if _, ok := out[name]; ok {
			return nil, fmt.Errorf("mcp server %q is configured both in the config file and in %s", name, c.MCPConfig)
		}
		out[name] = sc
	}
	return out, nil
}

// startMCP starts the configured MCP servers under supervision, their tools kept in reg under the
// server's name as source, and waits for their first starts, at most mcp-start-timeout; a server
// still starting then (npx downloading it, within mcp-install-timeout) is logged and goes on
// starting in the background.
func startMCP(ctx context.Context, c *config, reg *tools.Registry, log *slog.Logger) (*mcp.Manager, error) {
	servers, err := c.mcpServers()
	if err != nil {
		return nil, err
	}
	opts := mcp.Options{
		Logger:          log,
		StartTimeout:    c.MCPStartTimeout,
		InstallTimeout:  c.MCPInstallTimeout,
		RetryBase:       c.MCPRetryBase,
		RetryMax:        c.MCPRetryMax,
		BreakerFailures: c.BreakerFailures,
		BreakerCooldown: c.BreakerCooldown,
	}
	m := mcp.Start(ctx, servers, opts, func(server string, ts []*mcp.Tool) {
		list := make([]parley.Tool, len(ts))
		for i, t := range ts {
			list[i] = t
		}
		if err := reg.Replace(server, list); err != nil {
			log.Warn("mcp tools left out", "server", server, "err", err)
		}
	})
	for _, h := range m.Health() {
		log.Info("mcp server", "server", h.Server, "transport", h.Transport, "state", h.State, "tools", h.Tools)
	}
	return m, nil
}

// toolInfos lists the registry's tools with their servers' health, and the servers.
func toolInfos(reg *tools.Registry, m *mcp.Manager) ([]httpapi.ToolInfo, []httpapi.ServerInfo) {
	health := map[string]mcp.Health{}
	var servers []httpapi.ServerInfo
	for _, h := range m.Health() {
		health[h.Server] = h
		servers = append(servers, httpapi.ServerInfo{Name: h.Server, Transport: h.Transport, State: string(h.State),
			Breaker: h.Breaker, Tools: h.Tools, Restarts: h.Restarts, Since: h.Since})
	}
	var out []httpapi.ToolInfo
	for _, e := range reg.Entries() {
		st := reg.Stats(e.Name)
		ti := httpapi.ToolInfo{ToolSpec: e.ToolSpec, Server: e.Source, Breaker: string(reg.BreakerState(e.Name)), Stats: &st}
		if h, ok := health[e.Source]; ok {
			ti.Health = string(h.State)
		}
		out = append(out, ti)
	}
	return out, servers
}
