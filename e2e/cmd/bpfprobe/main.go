// Command bpfprobe says whether this host lets a process do what
// cilium-agent does at start: mount a BPF filesystem, create a map, load a
// tc program and attach it to a device (tcx), load a socket-address program
// and attach it to a cgroup v2, and pin an object. Each step prints ok or its
// error; the exit status is 1 if any step failed. Everything it creates (a
// dummy link, a cgroup, a mount in a temporary directory) is removed before
// it exits. Run as root: go run ./e2e/cmd/bpfprobe (docs/development.md
// "Cilium on this machine kind").
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	failed := 0
	step := func(name string, err error) {
		if err != nil {
			failed++
			fmt.Printf("FAIL %-34s %v\n", name, err)
			return
		}
		fmt.Printf("ok   %s\n", name)
	}
	facts()

	dir, err := os.MkdirTemp("", "bpfprobe-")
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	defer os.RemoveAll(dir)
	fs := filepath.Join(dir, "bpffs")
	step("mount bpffs", mountBPF(fs))
	defer unix.Unmount(fs, 0) // best effort: the directory goes too

	mapFD, err := bpf(unix.BPF_MAP_CREATE, mapCreate(unix.BPF_MAP_TYPE_ARRAY, 4, 8, 1))
	step("bpf(BPF_MAP_CREATE) array", err)
	if err == nil {
		step("bpf(BPF_OBJ_PIN) map in bpffs", pin(mapFD, filepath.Join(fs, "probe_map")))
		unix.Close(mapFD)
	}

	tc, err := loadProg(unix.BPF_PROG_TYPE_SCHED_CLS, 0)
	step("bpf(BPF_PROG_LOAD) sched_cls", err)
	if err == nil {
		step("bpf(BPF_LINK_CREATE) tcx ingress", attachTCX(tc))
		unix.Close(tc)
	}
	sock, err := loadProg(unix.BPF_PROG_TYPE_CGROUP_SOCK_ADDR, unix.BPF_CGROUP_INET4_CONNECT)
	step("bpf(BPF_PROG_LOAD) cgroup/connect4", err)
	if err == nil {
		step("bpf(BPF_PROG_ATTACH) cgroup v2 connect4", attachCgroup(sock))
		unix.Close(sock)
	}
	step("ip link add type vxlan (tunnel mode)", linkKind("vxlan", "dstport", "0", "external"))
	step("ip link add type geneve (tunnel mode)", linkKind("geneve", "external"))
	var rl unix.Rlimit
	step("setrlimit(RLIMIT_MEMLOCK, infinity)", unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}))
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) == nil {
		fmt.Printf("     RLIMIT_MEMLOCK now %d/%d (kernels 5.11+ charge BPF memory to the cgroup instead)\n", rl.Cur, rl.Max)
	}
	if failed > 0 {
		fmt.Printf("%d steps failed\n", failed)
		os.Exit(1)
	}
	fmt.Println("every step passed")
}

// facts prints what decides the answer before any step runs.
func facts() {
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		fmt.Printf("kernel %s\n", bytes.TrimRight(u.Release[:], "\x00"))
	}
	for _, f := range []string{"/proc/sys/kernel/unprivileged_bpf_disabled", "/proc/sys/net/core/bpf_jit_enable"} {
		b, err := os.ReadFile(f)
		fmt.Printf("%s = %s (%v)\n", f, strings.TrimSpace(string(b)), err)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "CapEff:") {
				fmt.Println(l)
			}
		}
	}
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	fmt.Printf("BTF /sys/kernel/btf/vmlinux: %v\n", err == nil)
	fmt.Printf("cgroup v2 mount: %q\n", cgroup2Mount())
}

func bpf(cmd int, attr []byte) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// mapCreate is union bpf_attr for BPF_MAP_CREATE (include/uapi/linux/bpf.h).
func mapCreate(typ, key, value, max uint32) []byte {
	a := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint32(a[0:], typ)
	le.PutUint32(a[4:], key)
	le.PutUint32(a[8:], value)
	le.PutUint32(a[12:], max)
	return a
}

// loadProg loads "r0 = 0; exit" as a program of typ.
func loadProg(typ, expectedAttach uint32) (int, error) {
	insns := []uint64{
		0xb7, // BPF_ALU64|BPF_MOV|BPF_K: r0 = 0
		0x95, // BPF_JMP|BPF_EXIT
	}
	if typ == unix.BPF_PROG_TYPE_CGROUP_SOCK_ADDR {
		insns[0] = 0xb7 | 1<<32 // r0 = 1: allow the connect
	}
	license := []byte("GPL\x00")
	log := make([]byte, 4096)
	a := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint32(a[0:], typ)
	le.PutUint32(a[4:], uint32(len(insns)))
	le.PutUint64(a[8:], uint64(uintptr(unsafe.Pointer(&insns[0]))))
	le.PutUint64(a[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	le.PutUint32(a[24:], 1) // log_level
	le.PutUint32(a[28:], uint32(len(log)))
	le.PutUint64(a[32:], uint64(uintptr(unsafe.Pointer(&log[0]))))
	le.PutUint32(a[68:], expectedAttach)
	fd, err := bpf(unix.BPF_PROG_LOAD, a)
	if err != nil {
		return fd, fmt.Errorf("%w: %s", err, bytes.TrimRight(log, "\x00"))
	}
	return fd, nil
}

func pin(fd int, path string) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	a := make([]byte, 128)
	binary.LittleEndian.PutUint64(a[0:], uint64(uintptr(unsafe.Pointer(p))))
	binary.LittleEndian.PutUint32(a[8:], uint32(fd))
	_, err = bpf(unix.BPF_OBJ_PIN, a)
	return err
}

func mountBPF(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return unix.Mount("bpf", dir, "bpf", 0, "")
}

// attachTCX attaches prog to the ingress of a veth of its own (tcx,
// kernel 6.6+, what Cilium 1.16+ prefers to tc's clsact), as Cilium does to
// cilium_host, a veth pair.
func attachTCX(prog int) error {
	const link = "bpfprobe0"
	if err := addLink(link, "veth", "peer", "name", link+"p"); err != nil {
		return err
	}
	defer exec.Command("ip", "link", "del", link).Run() // best effort
	ifc, err := netIndex(link)
	if err != nil {
		return err
	}
	a := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint32(a[0:], uint32(prog))
	le.PutUint32(a[4:], uint32(ifc))
	le.PutUint32(a[8:], unix.BPF_TCX_INGRESS)
	fd, err := bpf(unix.BPF_LINK_CREATE, a)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// addLink adds a link of kind (ip link add NAME type KIND ARGS...).
func addLink(name, kind string, args ...string) error {
	out, err := exec.Command("ip", append([]string{"link", "add", name, "type", kind}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip link add %s type %s: %w: %s", name, kind, err, bytes.TrimSpace(out))
	}
	return nil
}

// linkKind adds and deletes a link of kind: the devices Cilium creates in
// tunnel mode (vxlan, geneve) need the kernel to have them.
func linkKind(kind string, args ...string) error {
	const link = "bpfprobe1"
	if err := addLink(link, kind, args...); err != nil {
		return err
	}
	return exec.Command("ip", "link", "del", link).Run()
}

func netIndex(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "ifindex"))
	if err != nil {
		return 0, err
	}
	var i int
	_, err = fmt.Sscan(string(b), &i)
	return i, err
}

// attachCgroup attaches prog to a cgroup v2 of its own, then detaches it.
func attachCgroup(prog int) error {
	root := cgroup2Mount()
	if root == "" {
		return errors.New("no cgroup v2 mount")
	}
	cg, err := os.MkdirTemp(root, "bpfprobe-")
	if err != nil {
		return err
	}
	defer os.Remove(cg)
	fd, err := unix.Open(cg, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	a := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint32(a[0:], uint32(fd))
	le.PutUint32(a[4:], uint32(prog))
	le.PutUint32(a[8:], unix.BPF_CGROUP_INET4_CONNECT)
	if _, err := bpf(unix.BPF_PROG_ATTACH, a); err != nil {
		return err
	}
	_, err = bpf(unix.BPF_PROG_DETACH, a)
	return err
}

func cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}
