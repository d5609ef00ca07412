package mcp

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts a stdio server in a process group of its own, so that stopping it stops what
// it started too (npx starts node, for one), and has the kernel send it SIGTERM should Parley die
// without stopping it: no server outlives Parley, even after a SIGKILL.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// killGroup kills what is left of cmd's process group.
func killGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
