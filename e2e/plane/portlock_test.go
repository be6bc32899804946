package plane

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// A port another process of the suite holds is not handed out, and is
// once that process has ended: the second process here is this test binary
// run again as holdPort.
func TestPortHeldByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports.lock")
	const port = 23456
	child := exec.Command(os.Args[0], "-test.run=^TestHoldPortHelper$")
	child.Env = append(os.Environ(), "CAPSCALE_HOLD_PORT_LOCK="+path, "CAPSCALE_HOLD_PORT="+strconv.Itoa(port))
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = child.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("the holding process said %q, %v", line, err)
	}

	mine := &portLocks{path: path}
	if ok, err := mine.reserve(port); err != nil || ok {
		t.Fatalf("reserve(%d) while another process holds it = %v, %v; want false", port, ok, err)
	}
	if ok, err := mine.reserve(port + 1); err != nil || !ok {
		t.Fatalf("reserve(%d), held by no one = %v, %v; want true", port+1, ok, err)
	}
	if ok, _ := mine.reserve(port + 1); ok {
		t.Fatalf("reserve(%d) handed the port out twice in one process", port+1)
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatalf("the holding process: %v", err)
	}
	if ok, err := mine.reserve(port); err != nil || !ok {
		t.Fatalf("reserve(%d) after the holder ended = %v, %v; want true", port, ok, err)
	}
}

// TestHoldPortHelper is the other process of TestPortHeldByAnotherProcess:
// it holds a port until its stdin closes.
func TestHoldPortHelper(t *testing.T) {
	path := os.Getenv("CAPSCALE_HOLD_PORT_LOCK")
	if path == "" {
		t.Skip("run by TestPortHeldByAnotherProcess only")
	}
	port, err := strconv.Atoi(os.Getenv("CAPSCALE_HOLD_PORT"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := (&portLocks{path: path}).reserve(port); err != nil || !ok {
		t.Fatalf("reserve(%d) = %v, %v", port, ok, err)
	}
	os.Stdout.WriteString("held\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}
