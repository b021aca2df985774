package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/client"
)

// Server is a redis-server with the module, started for the demo, whose
// wall clock the demo can stop at an instant: build/clockshift.so (the
// integration tests' clock tool) is preloaded into it and maps a file that
// holds the instant; 0 lets the clock run. So the simulation drives the
// real commands at virtual instants, expiry included, with no test-only
// path in the module, and a minute of traffic replays in well under a
// second.
type Server struct {
	Addr  string
	RDB   *redis.Client
	C     *client.Client // the limiter calls, over RDB: the module's commands
	Lua   *client.Client // the same calls as FCALLs of the FUNCTION library (loaded on first use)
	cmd   *exec.Cmd
	dir   string
	clock *os.File
}

// StartServer starts bin (redis-server) on a free loopback port, loading
// module, with the clock tool shim preloaded.
func StartServer(bin, module, shim string) (*Server, error) {
	for _, p := range []string{module, shim} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s is missing: run make build build/clockshift.so (make demo does)", p)
		}
	}
	module, _ = filepath.Abs(module)
	shim, _ = filepath.Abs(shim)
	dir, err := os.MkdirTemp("", "ratelimit-demo-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir}
	if s.clock, err = os.Create(filepath.Join(dir, "at")); err != nil {
		s.Stop()
		return nil, err
	}
	if _, err := s.clock.WriteAt([]byte(fmt.Sprintf("%020d%12s\n", 0, "")), 0); err != nil {
		s.Stop()
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Stop()
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	s.cmd = exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--loadmodule", module)
	s.cmd.Env = append(os.Environ(), "LD_PRELOAD="+shim, "CLOCKSHIFT_AT_FILE="+filepath.Join(dir, "at"))
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // the server goes with the demo, however it ends
	if err := s.cmd.Start(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%s: %w (make demo installs Debian's redis-server)", bin, err)
	}
	s.RDB = redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	s.C = client.NewEngine(s.RDB, client.Module)
	s.Lua = client.NewEngine(s.RDB, client.Functions)
	deadline := time.Now().Add(10 * time.Second)
	for s.RDB.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("redis-server did not start on " + s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s, nil
}

// SetClock stops the server's wall clock at ns (Unix), or lets it run
// again for 0. It writes the mapped file in place, never shorter.
func (s *Server) SetClock(ns int64) error {
	_, err := s.clock.WriteAt([]byte(fmt.Sprintf("%020d", ns)), 0)
	return err
}

// Stop stops the server and removes its files.
func (s *Server) Stop() {
	if s.RDB != nil {
		s.RDB.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	if s.clock != nil {
		s.clock.Close()
	}
	os.RemoveAll(s.dir)
}
