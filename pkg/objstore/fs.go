package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// tmpPrefix starts the name of every file a Put is still writing. List skips such files and keys
// with an element that starts with it are rejected, so a crash mid-Put never shows up as an object.
const tmpPrefix = ".objstore-tmp-"

// FS stores objects as files under a root directory; a key "a/b.log" is the file root/a/b.log.
// It is meant for development, tests and single-node installs. ContentType and ContentEncoding
// are not stored: a file has no place for them and nothing reads them back. Unlike S3 and GCS, a
// key cannot be both an object and a prefix of other keys ("a/b" and "a/b/c"); Put reports the
// conflict as an error. The archive layout never produces one.
//
// With WithReadOnlyLocks, an object stored with PutOptions.RetainUntil is a read-only file
// (0444). Whatever the option, Delete refuses to remove a read-only file, and Put and Compose
// refuse to replace one with different bytes (the same bytes succeed, so a repeated write stays
// idempotent), both with ErrLocked. This guards against mistakes, not against an administrator:
// the owner of the files can make them writable again. Use S3 Object Lock or GCS retention for
// records that must resist a privileged user.
type FS struct {
	root string // absolute, cleaned
	lock bool   // store objects with a RetainUntil read-only
}

var _ Store = (*FS)(nil)

// FSOption configures NewFS.
type FSOption func(*FS)

// WithReadOnlyLocks makes the objects stored with PutOptions.RetainUntil read-only files.
func WithReadOnlyLocks() FSOption { return func(f *FS) { f.lock = true } }

// NewFS returns a store rooted at root, creating the directory if needed.
func NewFS(root string, opts ...FSOption) (*FS, error) {
	if root == "" {
		return nil, errors.New("create filesystem store: root is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("create filesystem store: resolve root %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create filesystem store: %w", err)
	}
	f := &FS{root: abs}
	for _, o := range opts {
		o(f)
	}
	return f, nil
}

// path maps key to its file, rejecting keys that could escape root or collide with temp files.
func (f *FS) path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	for elem := range strings.SplitSeq(key, "/") {
		if strings.HasPrefix(elem, tmpPrefix) {
			return "", fmt.Errorf("%w %q: path element starts with %q, reserved for uploads in progress", ErrInvalidKey, key, tmpPrefix)
		}
	}
	// ValidateKey rules out "..", absolute keys and empty elements, so the join stays under root.
	return filepath.Join(f.root, filepath.FromSlash(key)), nil
}

// Put writes r to a temporary file next to the target, syncs it and renames it over the target,
// so readers and crashes see either the old object or the whole new one, never a partial file.
func (f *FS) Put(ctx context.Context, key string, r io.Reader, opts PutOptions) error {
	p, err := f.path(key)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := f.write(ctx, p, newSource(ctx, r, opts.Checksum), f.lockUntil(opts), opts.IfAbsent); err != nil {
		return fmt.Errorf("put %s: %w", f.URL(key), err)
	}
	return nil
}

// Compose writes the sources one after the other to a temporary file next to dst, syncs it and
// renames it over dst, as Put does; a missing source removes the temporary file and fails the
// call. One source file is open at a time.
func (f *FS) Compose(ctx context.Context, dst string, srcs []string, opts PutOptions) error {
	if err := checkCompose(dst, srcs); err != nil {
		return fmt.Errorf("compose %s: %w", dst, err)
	}
	p, err := f.path(dst)
	if err != nil {
		return fmt.Errorf("compose %s: %w", dst, err)
	}
	for i, src := range srcs {
		if _, err := f.path(src); err != nil {
			return fmt.Errorf("compose %s: source %d: %w", dst, i, err)
		}
	}
	c := &concat{names: srcs, open: func(i int) (io.ReadCloser, error) { return f.open(srcs[i]) }}
	defer c.Close()
	if err := f.write(ctx, p, newSource(ctx, c, nil), f.lockUntil(opts), false); err != nil {
		return fmt.Errorf("compose %s: %w", f.URL(dst), err)
	}
	return nil
}

// lockUntil is the retain-until date of an object stored with opts, zero when it is not a
// read-only file.
func (f *FS) lockUntil(opts PutOptions) time.Time {
	if !f.lock {
		return time.Time{}
	}
	return opts.RetainUntil
}

// write copies r to a temporary file in p's directory, syncs it and renames it to p, read-only
// if until is not zero, with until as its modification time (its retain-until date, which
// DeleteExpired reads back). On failure it removes the temporary file. A read-only file at p is replaced by
// nothing: the same bytes leave it as it is, others fail with ErrLocked. With ifAbsent, any file
// at p is left as it is and the write fails with ErrExists: the temporary file is linked to p,
// which, unlike a rename, never replaces a file.
func (f *FS) write(ctx context.Context, p string, r io.Reader, until time.Time, ifAbsent bool) (err error) {
	dir := filepath.Dir(p)
	tmp, err := createTemp(dir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close() // may already be closed; the write error is what matters
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, r); err != nil {
		return err
	}
	// Sync before rename: otherwise a power loss can leave the renamed file empty or short.
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	mode := os.FileMode(0o644)
	if !until.IsZero() {
		mode = 0o444
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if !until.IsZero() {
		if err = os.Chtimes(tmp.Name(), time.Time{}, until); err != nil {
			return err
		}
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	// A write cancelled after the last byte must not store the object either.
	if err = ctx.Err(); err != nil {
		return err
	}
	if ifAbsent {
		err = os.Link(tmp.Name(), p)
		_ = os.Remove(tmp.Name()) // linked to p, or not kept
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %w", ErrExists, err)
		}
		if err != nil {
			return err
		}
		return f.syncDirs(dir)
	}
	if locked, err := isReadOnly(p); err != nil || locked {
		if err == nil {
			err = keepLocked(p, tmp.Name())
		}
		if err == nil {
			_ = os.Remove(tmp.Name()) // the same bytes are stored already
		}
		return err
	}
	if err = os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	return f.syncDirs(dir)
}

// syncDirs makes a new entry in dir durable: a rename or link is durable only once the directory
// entry is, and a directory created for it only once its own entry in its parent is. It syncs
// every directory up to the root (a few fsyncs of directories, cheap next to the file's).
func (f *FS) syncDirs(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("sync directory: %w", err)
		}
		if d == f.root || !strings.HasPrefix(d, f.root) {
			return nil
		}
	}
}

// isReadOnly reports whether p is a regular file nobody may write: a locked object.
func isReadOnly(p string) (bool, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		if errors.Is(notFound(err), ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return fi.Mode().IsRegular() && fi.Mode().Perm()&0o222 == 0, nil
}

// keepLocked compares the locked file p with the file tmp that would replace it: nil when they
// hold the same bytes, ErrLocked otherwise.
func keepLocked(p, tmp string) error {
	same, err := sameFiles(p, tmp)
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("%w: %s is read-only and holds other bytes", ErrLocked, p)
	}
	return nil
}

// sameFiles reports whether the files a and b hold the same bytes, reading both in step.
func sameFiles(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if erra == io.EOF || erra == io.ErrUnexpectedEOF {
			return errb == io.EOF || errb == io.ErrUnexpectedEOF, nil
		}
		if erra != nil {
			return false, erra
		}
		if errb != nil {
			return false, errb
		}
	}
}

// createTemp creates dir and a temporary file in it. A concurrent Delete may remove dir between
// the two steps when it prunes empty directories, so that race is retried.
func createTemp(dir string) (*os.File, error) {
	for attempt := 0; ; attempt++ {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
		if errors.Is(err, fs.ErrNotExist) && attempt < 5 {
			continue
		}
		return tmp, err
	}
}

// syncDir fsyncs a directory; a variable so a test can see which are.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Get opens the object's file.
func (f *FS) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := f.path(key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	file, err := openFile(p)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", f.URL(key), err)
	}
	return file, nil
}

// open opens the object's file, for Compose.
func (f *FS) open(key string) (io.ReadCloser, error) {
	p, err := f.path(key)
	if err != nil {
		return nil, err
	}
	file, err := openFile(p)
	if err != nil {
		return nil, err // not a nil *os.File in a non-nil io.ReadCloser
	}
	return file, nil
}

// openFile opens the regular file p; a missing file, or a directory, is ErrNotFound.
func openFile(p string) (*os.File, error) {
	file, err := os.Open(p)
	if err != nil {
		return nil, notFound(err)
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		file.Close()
		return nil, ErrNotFound
	}
	return file, nil
}

// Stat returns the size of the object's file.
func (f *FS) Stat(_ context.Context, key string) (ObjectInfo, error) {
	p, err := f.path(key)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", f.URL(key), notFound(err))
	}
	if !fi.Mode().IsRegular() {
		// A directory is a key prefix, not an object (S3 and GCS behave the same way).
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", f.URL(key), ErrNotFound)
	}
	return ObjectInfo{Key: key, Size: fi.Size()}, nil
}

// notFound translates the errors that mean "no file under this path" into ErrNotFound. ENOTDIR
// means a parent element is an object ("a" exists, "a/b" was asked for): b does not exist either.
func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// DeleteExpired removes the object like Delete, and also when it is a read-only file whose
// retain-until date (its modification time, set by Put and Compose) is at or before now: the
// retention pruner's way to delete what it may (S3 and GCS need none: they allow the deletion of
// an object once its retention has passed). A read-only file retained past now is refused with
// ErrLocked, as Delete refuses it.
func (f *FS) DeleteExpired(ctx context.Context, key string, now time.Time) error {
	p, err := f.path(key)
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	fi, err := os.Lstat(p)
	if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o222 == 0 {
		if fi.ModTime().After(now) {
			return fmt.Errorf("delete %s: %w: retained until %s", f.URL(key), ErrLocked, fi.ModTime().UTC().Format(time.RFC3339))
		}
		if err := os.Chmod(p, 0o644); err != nil {
			return fmt.Errorf("delete %s: %w", f.URL(key), err)
		}
	}
	return f.Delete(ctx, key)
}

// Delete removes the object's file and then the directories it leaves empty, so that deleted
// prefixes do not pile up as empty directories.
func (f *FS) Delete(_ context.Context, key string) error {
	p, err := f.path(key)
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		if errors.Is(notFound(err), ErrNotFound) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", f.URL(key), err)
	}
	if fi.IsDir() {
		return nil // a prefix of other objects, not an object
	}
	if fi.Mode().IsRegular() && fi.Mode().Perm()&0o222 == 0 {
		return fmt.Errorf("delete %s: %w: the file is read-only", f.URL(key), ErrLocked)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", f.URL(key), err)
	}
	for dir := filepath.Dir(p); dir != f.root && strings.HasPrefix(dir, f.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty (or gone): stop pruning
		}
	}
	return nil
}

// List walks the directories under prefix in lexical key order. Directory entries are sorted as
// "name/" because that is where their keys sort: "a-c" < "a/b" although "a" < "a-c".
// An error from fn stops the walk and is returned unchanged.
func (f *FS) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	dirKey := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirKey = prefix[:i]
		if err := ValidateKey(dirKey); err != nil {
			return fmt.Errorf("list %s: prefix: %w", prefix, err)
		}
		dirKey += "/"
	}
	l := &lister{ctx: ctx, prefix: prefix, fn: fn}
	err := l.walk(filepath.Join(f.root, filepath.FromSlash(dirKey)), dirKey)
	var stop stopError
	switch {
	case errors.As(err, &stop):
		return stop.err
	case errors.Is(notFound(err), ErrNotFound):
		return nil // nothing was ever stored under prefix
	case err != nil:
		return fmt.Errorf("list %s: %w", f.URL(prefix), err)
	}
	return nil
}

// stopError carries fn's error out of the walk, distinguishable from the walk's own errors.
type stopError struct{ err error }

func (e stopError) Error() string { return e.err.Error() }

type lister struct {
	ctx    context.Context
	prefix string
	fn     func(ObjectInfo) error
}

// walk lists dir, whose entries' keys start with dirKey.
func (l *lister) walk(dir, dirKey string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type entry struct {
		de   fs.DirEntry
		sort string
	}
	sorted := make([]entry, 0, len(entries))
	for _, de := range entries {
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			continue
		}
		s := de.Name()
		if de.IsDir() {
			s += "/"
		}
		sorted = append(sorted, entry{de: de, sort: s})
	}
	slices.SortFunc(sorted, func(a, b entry) int { return strings.Compare(a.sort, b.sort) })
	for _, e := range sorted {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		key := dirKey + e.sort
		switch {
		case !strings.HasPrefix(key, l.prefix) && !strings.HasPrefix(l.prefix, key):
			continue
		case e.de.IsDir():
			err := l.walk(filepath.Join(dir, e.de.Name()), key)
			// A directory emptied and pruned by a concurrent Delete simply has nothing to list.
			if err != nil && !errors.Is(notFound(err), ErrNotFound) {
				return err
			}
		case e.de.Type().IsRegular() && strings.HasPrefix(key, l.prefix):
			fi, err := e.de.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted while listing
			}
			if err != nil {
				return err
			}
			if err := l.fn(ObjectInfo{Key: key, Size: fi.Size()}); err != nil {
				return stopError{err}
			}
		}
	}
	return nil
}

// URL returns the file:// URL of the object's file, percent-encoded as browsers and curl expect.
func (f *FS) URL(key string) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(f.root, filepath.FromSlash(key)))}
	return u.String()
}

// Ping checks that the root directory exists.
func (f *FS) Ping(context.Context) error {
	fi, err := os.Stat(f.root)
	if err != nil {
		return fmt.Errorf("ping %s: %w", f.root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("ping %s: not a directory", f.root)
	}
	return nil
}
