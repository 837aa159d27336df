package testbed

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The real node changes the machine outside its work dir: the kubelet rewrites kernel settings,
// and containerd, the CNI plugins and the kubelet use a few paths whatever their configuration
// says. hostState records the machine as found, so that the node's stop puts it back; it is also
// written to hostStateFile, so that the next run puts it back after a run that was killed.

// kubeletSysctls are the kernel settings the kubelet sets at its start (setupKernelTunables).
var kubeletSysctls = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// fixedPaths are the paths the node's parts use whatever their configuration says: containerd's
// shim sockets (/run/containerd/s), the network namespaces (/run/netns), libcni's result cache
// (/var/lib/cni/results), the kubelet's device plugin socket dir
// (/var/lib/kubelet/device-plugins) and its symlinks to container logs (/var/log/containers).
var fixedPaths = []string{"/run/containerd", "/run/netns", "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers", "/var/log/pods"}

const (
	hostStateFile = "/var/lib/jobvault-testbed/realnode.json"
	// realNodeLock serialises real nodes across test binaries: the fixed paths, the cgroups and
	// the node's bridge are the machine's.
	realNodeLock = "/run/lock/jobvault-testbed-realnode.lock"
)

// hostState is the machine as the real node found it.
type hostState struct {
	// Dir is the node's work dir; Socket its containerd's address.
	Dir, Socket string
	// Sysctls are the kernel settings the kubelet rewrites, as found.
	Sysctls map[string]string
	// Absent are the fixed paths that did not exist: the stop removes them.
	Absent []string
}

// lockHost takes the machine-wide real node lock, waiting up to timeout for another test binary's
// node to stop.
func lockHost(timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(realNodeLock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", realNodeLock, err)
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s (another test binary's real node runs): %w", realNodeLock, err)
		}
	}
}

// saveHost records the machine as found, after restoring it from a killed run's record if any.
func saveHost(dir, socket string) (*hostState, error) {
	if b, err := os.ReadFile(hostStateFile); err == nil {
		var prev hostState
		if err := json.Unmarshal(b, &prev); err != nil {
			return nil, fmt.Errorf("read %s: %w", hostStateFile, err)
		}
		fmt.Fprintf(os.Stderr, "testbed: a real node of a killed run was not stopped; restoring the machine from %s\n", hostStateFile)
		if err := prev.restore(); err != nil {
			return nil, err
		}
	}
	h := &hostState{Dir: dir, Socket: socket, Sysctls: map[string]string{}}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(sysctlPath(k))
		if err != nil {
			return nil, fmt.Errorf("read kernel setting %s: %w", k, err)
		}
		h.Sysctls[k] = strings.TrimSpace(string(v))
	}
	for _, p := range fixedPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			h.Absent = append(h.Absent, p)
		}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(hostStateFile), 0o755); err != nil {
		return nil, err
	}
	return h, os.WriteFile(hostStateFile, b, 0o644)
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// restore puts the machine back: it ends every container and shim of the node (the parts
// themselves are stopped already), unmounts what they mounted, removes the bridge, the node's
// address, the pods' cgroups and the fixed paths that were absent, and writes the kernel
// settings back. It goes on after a failure and returns every one.
func (h *hostState) restore() error {
	var errs []error
	errs = append(errs, killPodProcesses(), killShims(h.Socket))
	errs = append(errs, unmountUnder(append([]string{h.Dir}, h.Absent...)))
	if _, err := os.Stat("/sys/class/net/" + cniBridge); err == nil {
		if out, err := exec.Command("ip", "link", "delete", cniBridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge %s: %w: %s", cniBridge, err, out))
		}
	}
	errs = append(errs, removeCgroups(), delNodeIP())
	for _, p := range h.Absent {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	for k, v := range h.Sysctls {
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore kernel setting %s=%s: %w", k, v, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore the machine after the real node: %w", err)
	}
	return os.Remove(hostStateFile)
}

// addNodeIP puts realNodeIP on the loopback interface.
func addNodeIP() error {
	if hasNodeIP() {
		return nil
	}
	if out, err := exec.Command("ip", "addr", "add", realNodeIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("add the real node's address %s to lo: %w: %s", realNodeIP, err, out)
	}
	return nil
}

func delNodeIP() error {
	if !hasNodeIP() {
		return nil
	}
	if out, err := exec.Command("ip", "addr", "del", realNodeIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("delete the real node's address %s from lo: %w: %s", realNodeIP, err, out)
	}
	return nil
}

func hasNodeIP() bool {
	out, _ := exec.Command("ip", "-o", "addr", "show", "dev", "lo").Output()
	return strings.Contains(string(out), " "+realNodeIP+"/")
}

// podCgroups are the kubelet's pod cgroups (cgroupfs driver, cgroup root "/") in every cgroup v1
// hierarchy (and the v2 one of a hybrid mount).
func podCgroups() []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	return dirs
}

// killPodProcesses kills every process in the pods' cgroups and waits until they are gone.
func killPodProcesses() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := map[int]bool{}
		for _, root := range podCgroups() {
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						pids[pid] = true
					}
				}
				return nil
			})
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of the real node's pods still running after SIGKILL: %v", pids)
		}
		for pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killShims kills containerd's shims of the node's containerd (they outlive containerd by
// design, and would keep its sockets and mounts).
func killShims(socket string) error {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.Contains(args[0], "containerd-shim") || !strings.Contains(string(b), "\x00"+socket+"\x00") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// unmountUnder detaches every mount at or under one of the dirs, deepest first.
func unmountUnder(dirs []string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				points = append(points, mp)
				break
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
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

// removeCgroups removes the pods' cgroups, innermost first (a cgroup is removed with rmdir once
// empty).
func removeCgroups() error {
	var errs []error
	for _, root := range podCgroups() {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}
