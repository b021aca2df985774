// Package machine is what both benchmark programs need of the machine they
// run on: a free loopback port, and the CPU's name and count.
package machine

import (
	"bufio"
	"log"
	"net"
	"os"
	"runtime"
	"strings"
)

// FreePort is a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// CPU is the CPU's model name (the architecture when /proc/cpuinfo
// does not say) and the number of CPUs.
func CPU() (string, int) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH, runtime.NumCPU()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":")), runtime.NumCPU()
		}
	}
	return runtime.GOARCH, runtime.NumCPU()
}
