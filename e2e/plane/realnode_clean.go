package plane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cleanup removes one node from the host, whatever state it was left in:
// no step relies on the kubelet or containerd still answering. It kills
// the node's processes, unmounts what is mounted under its directory (the
// containers' root filesystems, the pods' network namespaces and volumes,
// the kubelet's bind mount of its root), removes its cgroups, its bridge
// and its files in the shared directories, then its directory.
func (n *nodeFootprint) cleanup() []error {
	var errs []error
	// The shims' sockets are in /run/containerd/s under a hash; each
	// task's bundle names its shim's, so read them while the bundles exist.
	sockets := n.shimSockets()
	if err := n.killAll(20 * time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := unmountAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, n.removeCgroups(10*time.Second)...)
	if linkExists(n.Bridge) {
		if out, err := exec.Command("ip", "link", "delete", n.Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %w: %s", n.Bridge, err, out))
		}
	}
	for _, f := range append(n.sharedFiles(), sockets...) {
		errs = append(errs, removeIfExists(f))
	}
	// Never remove through a mount: what is mounted is not the node's.
	if ms := mountsUnder(n.Dir); len(ms) == 0 {
		if err := os.RemoveAll(n.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", n.Dir, err))
		}
	}
	return errs
}

// ownExecutables are the programs a node runs that name its directory in
// their arguments (--config, --root-dir, -address, --root; kube-proxy's
// --config is in the first node's directory).
var ownExecutables = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "kube-proxy"}

// processes lists the node's processes: those in its cgroups (the
// containers) and its kubelet, containerd, shims and runc, which name its
// directory in their arguments.
func (n *nodeFootprint) processes() []int {
	var pids []int
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if n.ownsProcess(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (n *nodeFootprint) ownsProcess(pid int) bool {
	for _, l := range readLines(fmt.Sprintf("/proc/%d/cgroup", pid)) {
		// hierarchy-id:controllers:path
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && underPath(parts[2], n.CgroupRoot) {
			return true
		}
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || !slices.Contains(ownExecutables, filepath.Base(strings.TrimSuffix(exe, " (deleted)"))) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if strings.Contains(arg, n.Dir+"/") || strings.HasSuffix(arg, n.Dir) {
			return true
		}
	}
	return false
}

// underPath reports whether p is dir or below it.
func underPath(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// killAll SIGKILLs the node's processes until none is left: the kubelet
// and containerd would start more, and a shim outlives its containerd.
func (n *nodeFootprint) killAll(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := n.processes()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: processes %v still run after %s of SIGKILL", n.Name, pids, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountsUnder lists the mount points at or below dir, deepest (and most
// recent) first.
func mountsUnder(dir string) []string {
	var ms []string
	for _, l := range readLines("/proc/self/mountinfo") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		if mp := unescapeMount(f[4]); underPath(mp, dir) {
			ms = append(ms, mp)
		}
	}
	slices.Reverse(ms)
	slices.SortStableFunc(ms, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return ms
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts everything at or below dir, lazily where busy, until
// nothing is left (a mount point can be stacked, as the kubelet's root is).
func unmountAll(dir string) error {
	for range 20 {
		ms := mountsUnder(dir)
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			if err := syscall.Unmount(m, 0); err != nil {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
	}
	if ms := mountsUnder(dir); len(ms) > 0 {
		return fmt.Errorf("could not unmount %v", ms)
	}
	return nil
}

// cgroupMounts lists the mount points of every cgroup hierarchy (v1 and v2).
func cgroupMounts() []string {
	var hs []string
	for _, l := range readLines("/proc/self/mountinfo") {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && (g[0] == "cgroup" || g[0] == "cgroup2") {
			hs = append(hs, unescapeMount(f[4]))
		}
	}
	return hs
}

// createCgroupRoot makes the node's cgroupRoot in every hierarchy: the
// kubelet refuses a root that does not exist where it looks.
func (n *nodeFootprint) createCgroupRoot() error {
	for _, h := range cgroupMounts() {
		if err := os.Mkdir(filepath.Join(h, n.CgroupRoot), 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", filepath.Join(h, n.CgroupRoot), err)
		}
	}
	return nil
}

// removeCgroups removes the node's cgroups, leaves first, in every
// hierarchy; a cgroup whose last process is still exiting is retried.
func (n *nodeFootprint) removeCgroups(timeout time.Duration) []error {
	var errs []error
	for _, h := range cgroupMounts() {
		root := filepath.Join(h, n.CgroupRoot)
		deadline := time.Now().Add(timeout)
		for {
			err := removeCgroupTree(root)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					errs = append(errs, err)
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return errs
}

func removeCgroupTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	slices.Reverse(dirs) // WalkDir lists parents before children
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing cgroup %s: %w", d, err)
		}
	}
	return nil
}

// sharedFiles lists the node's files in the shared directories: its CNI
// results (<network>-<sandbox>-<interface>: its own network's, and the
// loopback network's of its sandboxes) and the kubelet's links to its
// container logs.
func (n *nodeFootprint) sharedFiles() []string {
	const results = "/var/lib/cni/results"
	fs, _ := filepath.Glob(filepath.Join(results, n.Network+"-*"))
	sandboxes := map[string]bool{}
	for _, f := range fs {
		if id, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(f), n.Network+"-"), "-"); ok {
			sandboxes[id] = true
		}
	}
	dirs, _ := os.ReadDir(filepath.Join(n.Dir, "containerd", "root", "io.containerd.grpc.v1.cri", "sandboxes"))
	for _, d := range dirs {
		sandboxes[d.Name()] = true
	}
	for id := range sandboxes {
		lo, _ := filepath.Glob(filepath.Join(results, "cni-loopback-"+id+"-*"))
		fs = append(fs, lo...)
	}
	links, _ := os.ReadDir("/var/log/containers")
	for _, l := range links {
		p := filepath.Join("/var/log/containers", l.Name())
		if target, err := os.Readlink(p); err == nil && underPath(target, n.PodLogsDir) {
			fs = append(fs, p)
		}
	}
	return fs
}

// shimSockets lists the sockets of the node's shims, as each task's bundle
// records them ("unix:///run/containerd/s/<hash>").
func (n *nodeFootprint) shimSockets() []string {
	addrs, _ := filepath.Glob(filepath.Join(n.Dir, "containerd", "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
	var out []string
	for _, a := range addrs {
		b, err := os.ReadFile(a)
		if err != nil {
			continue
		}
		p := strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://")
		if underPath(p, "/run/containerd/s") {
			out = append(out, p)
		}
	}
	return out
}
