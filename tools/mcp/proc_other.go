//go:build !linux

package mcp

import "os/exec"

// setProcAttr does nothing here: process groups and the parent-death signal are set on Linux only.
func setProcAttr(*exec.Cmd) {}

// killGroup does nothing here; the SDK's Close stops the server process itself.
func killGroup(*exec.Cmd) {}
