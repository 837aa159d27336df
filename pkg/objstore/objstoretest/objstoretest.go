// Package objstoretest is the conformance suite every objstore.Store backend passes: the same
// cases run against the filesystem, MinIO and the GCS emulator, so the backends cannot drift
// apart (in the manner of thanos-io/objstore's objtesting).
package objstoretest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// LargeObjectSize is the size of the object the suite streams with unknown length. It spans three
// parts of S3's minimum part size (5 MiB) and stays far below the 64 MiB beyond which
// fake-gcs-server's resumable uploads get slow: configure backends under test with
// PartSize MinPartSize and a ChunkSize of a few MiB to exercise multi-part uploads.
const LargeObjectSize = 12<<20 + 4321

// MetadataStore is a Store that also reports the content type and encoding stored with an object.
// The Store interface cannot read them back (nothing in the archive needs to), so harnesses of
// backends that keep them wrap the store to read them through the service's own API; the suite
// then checks that Compose sets them. Stores without it (the filesystem keeps neither) skip that
// check.
type MetadataStore interface {
	objstore.Store
	Metadata(ctx context.Context, key string) (objstore.PutOptions, error)
}

// Run runs the conformance suite. newStore is called once per subtest and must return an empty
// store, cleaned up through t.Cleanup; a MetadataStore also has its stored content types and
// encodings checked. Subtests do not run in parallel, so newStore may call t.Setenv (as the GCS
// emulator needs).
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s objstore.Store)
	}{
		{"Ping", testPing},
		{"RoundTrip", testRoundTrip},
		{"StoredBytesAreNotDecoded", testStoredBytesAreNotDecoded},
		{"LargeStreamOfUnknownLength", testLargeStream},
		{"Overwrite", testOverwrite},
		{"PutIfAbsentNeverReplaces", testPutIfAbsent},
		{"NotFound", testNotFound},
		{"Delete", testDelete},
		{"List", testList},
		{"ListStopsOnError", testListStopsOnError},
		{"InvalidKeys", testInvalidKeys},
		{"ConcurrentPuts", testConcurrentPuts},
		{"ConcurrentOverwrites", testConcurrentOverwrites},
		{"CancelledPutStoresNothing", testCancelledPut},
		{"FailedSourceStoresNothing", testFailedSource},
		{"ChecksummedPut", testChecksummedPut},
		{"Compose", testCompose},
		{"ComposeLargeSources", testComposeLarge},
		{"ComposeManySources", testComposeMany},
		{"ComposeGzipMembers", testComposeGzipMembers},
		{"ComposeMissingSourceStoresNothing", testComposeMissingSource},
		{"ComposeRefusesBadArguments", testComposeRefused},
		{"URL", testURL},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, newStore(t)) })
	}
}

func testPing(t *testing.T, s objstore.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testRoundTrip(t *testing.T, s objstore.Store) {
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		key  string
		data []byte
	}{
		{"small", "small.txt", []byte("hello, jobvault\n")},
		{"empty", "empty", []byte{}},
		{"every byte value", "bin/all-bytes", allBytes},
		{"nested key", "ns/job/0a1b2c/pods/pod-0/9f8e/main.log.gz", []byte("nested")},
		{"spaces", "with space/file name.log", []byte("spaces")},
		{"unicode", "ünïcødé/日本語/ログ 🚀.log", []byte("unicode")},
		{"punctuation", "p/a+b=c,d;e@f&g$h(i)[j]{k}'l'~m!n#o%20p.log", []byte("punctuation")},
		{"one MiB", "mib", randomBytes(1, 1<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			put(t, s, tc.key, tc.data)
			assertContent(t, s, tc.key, tc.data)
		})
	}
}

// testStoredBytesAreNotDecoded guards the archive's byte-exactness: GCS (and HTTP clients with
// transparent decompression) would hand back decompressed bytes of a gzip-encoded object.
func testStoredBytesAreNotDecoded(t *testing.T, s objstore.Store) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(bytes.Repeat([]byte("a log line that compresses well\n"), 1000)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	const key = "pods/main.log.gz"
	opts := objstore.PutOptions{ContentType: "text/plain; charset=utf-8", ContentEncoding: "gzip"}
	if err := s.Put(t.Context(), key, bytes.NewReader(buf.Bytes()), opts); err != nil {
		t.Fatalf("Put: %v", err)
	}
	assertContent(t, s, key, buf.Bytes())
}

func testLargeStream(t *testing.T, s objstore.Store) {
	const key = "large/stream.log"
	pr, pw := io.Pipe()
	want := sha256.New()
	written := make(chan struct{})
	go func() {
		defer close(written)
		// Uneven writes, so no part or chunk boundary lines up with a write.
		rng := rand.New(rand.NewPCG(1, 2))
		buf := make([]byte, 100_000)
		for left := LargeObjectSize; left > 0; {
			n := min(left, 1+rng.IntN(len(buf)))
			fill(rng, buf[:n])
			want.Write(buf[:n])
			if _, err := pw.Write(buf[:n]); err != nil {
				return // Put failed and closed the pipe; the test reports its error
			}
			left -= n
		}
		pw.Close()
	}()
	err := s.Put(t.Context(), key, pr, objstore.PutOptions{ContentType: "application/octet-stream"})
	pr.CloseWithError(errors.New("put returned")) // unblocks the writer if Put stopped early
	<-written
	if err != nil {
		t.Fatalf("Put: %v", err)
	}

	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got := sha256.New()
	n, err := io.Copy(got, rc)
	if err != nil {
		t.Fatalf("read %s after %d bytes: %v", key, n, err)
	}
	if n != LargeObjectSize {
		t.Errorf("read %d bytes, want %d", n, LargeObjectSize)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Errorf("sha256 of read bytes %x, want %x", got.Sum(nil), want.Sum(nil))
	}
	assertSize(t, s, key, LargeObjectSize)
}

func testOverwrite(t *testing.T, s objstore.Store) {
	const key = "a/overwritten"
	put(t, s, key, []byte("first version, the longer one"))
	put(t, s, key, []byte("second"))
	assertContent(t, s, key, []byte("second"))
	put(t, s, key, nil)
	assertContent(t, s, key, nil)
}

// testPutIfAbsent: a write-once Put stores an object under a free key, and fails with ErrExists
// under a taken one, the object there left as it was, whatever the bytes offered (the same or not).
func testPutIfAbsent(t *testing.T, s objstore.Store) {
	const key = "a/write-once"
	once := func(data []byte) error {
		return s.Put(t.Context(), key, bytes.NewReader(data), objstore.PutOptions{IfAbsent: true, Checksum: objstore.ChecksumOf(data)})
	}
	if err := once([]byte("first")); err != nil {
		t.Fatalf("write-once Put under a free key: %v", err)
	}
	for _, data := range [][]byte{[]byte("second, other bytes"), []byte("first")} {
		if err := once(data); !errors.Is(err, objstore.ErrExists) {
			t.Errorf("write-once Put of %q under a taken key: %v, want ErrExists", data, err)
		}
	}
	assertContent(t, s, key, []byte("first"))
}

func testNotFound(t *testing.T, s objstore.Store) {
	put(t, s, "dir/object", []byte("x"))
	// "dir" is a prefix of an object but no object itself; "dir/object/sub" has an object as
	// its "parent", which filesystems see as a file used as a directory.
	for _, key := range []string{"missing", "dir", "dir/missing", "dir/object/sub", "dir/obj"} {
		t.Run(key, func(t *testing.T) {
			rc, err := s.Get(t.Context(), key)
			if err == nil {
				rc.Close()
			}
			if !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("Get(%q) error = %v, want ErrNotFound", key, err)
			}
			if _, err := s.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("Stat(%q) error = %v, want ErrNotFound", key, err)
			}
		})
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	put(t, s, "d/keep", []byte("keep"))
	put(t, s, "d/gone/deep", []byte("gone"))
	for i := range 2 { // the second Delete finds nothing and must succeed all the same
		if err := s.Delete(t.Context(), "d/gone/deep"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if _, err := s.Stat(t.Context(), "d/gone/deep"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat after Delete: error = %v, want ErrNotFound", err)
	}
	for _, key := range []string{"never-existed", "d", "d/gone"} {
		if err := s.Delete(t.Context(), key); err != nil {
			t.Errorf("Delete(%q) of no object: %v", key, err)
		}
	}
	if diff := cmp.Diff([]objstore.ObjectInfo{{Key: "d/keep", Size: 4}}, list(t, s, "")); diff != "" {
		t.Errorf("List after Delete (-want +got):\n%s", diff)
	}
	// The key is usable again after its directory-like prefix emptied.
	put(t, s, "d/gone/deep", []byte("back"))
	assertContent(t, s, "d/gone/deep", []byte("back"))
}

func testList(t *testing.T, s objstore.Store) {
	// Sorted by byte value: '-' (0x2d) < '.' (0x2e) < '/' (0x2f) < letters < UTF-8 multibyte,
	// which is how S3 and GCS order keys and how a filesystem walk does not.
	all := []objstore.ObjectInfo{
		{Key: "logs/a-c.log", Size: 1},
		{Key: "logs/a.log", Size: 2},
		{Key: "logs/a/b.log", Size: 3},
		{Key: "logs/a/c/d.log", Size: 4},
		{Key: "logs/b.log", Size: 5},
		{Key: "logs/ü space.log", Size: 6},
		{Key: "logsx/e.log", Size: 7},
		{Key: "other/f.log", Size: 8},
	}
	// Stored out of order, so no backend can pass by returning insertion order.
	for _, i := range []int{4, 0, 7, 2, 5, 1, 6, 3} {
		put(t, s, all[i].Key, bytes.Repeat([]byte{'x'}, int(all[i].Size)))
	}
	for _, tc := range []struct {
		prefix string
		want   []objstore.ObjectInfo
	}{
		{"", all},
		{"logs/", all[:6]},
		{"logs", all[:7]},
		{"logs/a", all[:4]},
		{"logs/a/", all[2:4]},
		{"logs/a/c/d.log", all[3:4]},
		{"logs/ü", all[5:6]},
		{"o", all[7:]},
		{"nothing/", nil},
		{"logs/b.log/", nil},
	} {
		t.Run("prefix="+tc.prefix, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, list(t, s, tc.prefix)); diff != "" {
				t.Errorf("List(%q) (-want +got):\n%s", tc.prefix, diff)
			}
		})
	}
}

func testListStopsOnError(t *testing.T, s objstore.Store) {
	for _, key := range []string{"s/1", "s/2", "s/3"} {
		put(t, s, key, []byte(key))
	}
	errStop := errors.New("enough")
	var seen []string
	err := s.List(t.Context(), "s/", func(o objstore.ObjectInfo) error {
		seen = append(seen, o.Key)
		if len(seen) == 2 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Errorf("List error = %v, want the callback's error", err)
	}
	if diff := cmp.Diff([]string{"s/1", "s/2"}, seen); diff != "" {
		t.Errorf("keys seen (-want +got):\n%s", diff)
	}
}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	for _, key := range []string{
		"", "/abs", "trailing/", "a//b", ".", "..", "../escape", "a/../../escape", "a/./b",
		"nul\x00", "line\nfeed", strings.Repeat("k", 1025), "\xff\xfe",
	} {
		t.Run(fmt.Sprintf("%.20q", key), func(t *testing.T) {
			ctx := t.Context()
			if err := s.Put(ctx, key, strings.NewReader("x"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Put error = %v, want ErrInvalidKey", err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Get error = %v, want ErrInvalidKey", err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Stat error = %v, want ErrInvalidKey", err)
			}
			if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Delete error = %v, want ErrInvalidKey", err)
			}
			if err := s.Compose(ctx, key, []string{"src"}, objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Compose to it: error = %v, want ErrInvalidKey", err)
			}
			if err := s.Compose(ctx, "dst", []string{"src", key}, objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Compose from it: error = %v, want ErrInvalidKey", err)
			}
		})
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Errorf("List after invalid Puts = %v, want nothing", got)
	}
}

func testConcurrentPuts(t *testing.T, s objstore.Store) {
	const n = 8
	data := make([][]byte, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		data[i] = randomBytes(uint64(i), 200_000+i)
		wg.Go(func() {
			errs[i] = s.Put(t.Context(), fmt.Sprintf("concurrent/%d/obj", i), bytes.NewReader(data[i]), objstore.PutOptions{})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Puts: %v", err)
	}
	for i := range n {
		assertContent(t, s, fmt.Sprintf("concurrent/%d/obj", i), data[i])
	}
}

// testConcurrentOverwrites checks that racing Puts of one key leave one whole version, never a
// mix or a truncation.
func testConcurrentOverwrites(t *testing.T, s objstore.Store) {
	const n, key = 6, "same/key"
	versions := make([][]byte, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		versions[i] = randomBytes(uint64(100+i), 150_000+i*1000)
		wg.Go(func() {
			errs[i] = s.Put(t.Context(), key, bytes.NewReader(versions[i]), objstore.PutOptions{})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Puts: %v", err)
	}
	got := get(t, s, key)
	if !slices.ContainsFunc(versions, func(v []byte) bool { return bytes.Equal(v, got) }) {
		t.Errorf("Get after racing Puts returned %d bytes matching none of the versions", len(got))
	}
	if got := list(t, s, ""); len(got) != 1 {
		t.Errorf("List after racing Puts = %v, want the one key", got)
	}
}

// testCancelledPut cancels a Put after more than one S3 part has been read, while the source keeps
// producing data: the Put must fail and leave the key as it was.
func testCancelledPut(t *testing.T, s objstore.Store) {
	for _, tc := range []struct {
		name string
		old  []byte // stored under the key before the cancelled Put; nil: none
	}{
		{"new key", nil},
		{"existing key", []byte("the old version survives")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "cancelled/" + strings.ReplaceAll(tc.name, " ", "-")
			if tc.old != nil {
				put(t, s, key, tc.old)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			pr, pw := io.Pipe()
			done := make(chan struct{})
			go func() {
				defer close(done)
				chunk := randomBytes(7, 64<<10)
				for written := 0; ; written += len(chunk) {
					if written >= 6<<20 {
						cancel()
					}
					if _, err := pw.Write(chunk); err != nil {
						return
					}
				}
			}()
			err := s.Put(ctx, key, pr, objstore.PutOptions{})
			pr.CloseWithError(errors.New("put returned"))
			<-done
			if err == nil {
				t.Fatal("Put with a cancelled context succeeded")
			}
			t.Logf("Put error (expected): %v", err)
			assertAbsentOr(t, s, key, tc.old)
		})
	}
}

// testFailedSource breaks the source mid-stream, as a log stream does when its node goes away:
// the Put must fail with the source's error and store nothing. io.ErrUnexpectedEOF is the case
// minio-go would otherwise take for a normal end of input.
func testFailedSource(t *testing.T, s objstore.Store) {
	for _, srcErr := range []error{errors.New("log stream broke"), io.ErrUnexpectedEOF} {
		t.Run(srcErr.Error(), func(t *testing.T) {
			key := "failed/" + strings.ReplaceAll(srcErr.Error(), " ", "-")
			pr, pw := io.Pipe()
			go func() {
				chunk := randomBytes(8, 64<<10)
				for written := 0; written < 6<<20; written += len(chunk) {
					if _, err := pw.Write(chunk); err != nil {
						return
					}
				}
				pw.CloseWithError(srcErr)
			}()
			err := s.Put(t.Context(), key, pr, objstore.PutOptions{})
			pr.CloseWithError(errors.New("put returned"))
			if !errors.Is(err, srcErr) {
				t.Fatalf("Put error = %v, want the source's error %q", err, srcErr)
			}
			assertAbsentOr(t, s, key, nil)
		})
	}
}

// testChecksummedPut checks that a Put given the checksum of its bytes stores them, and that one
// given the checksum of other bytes (an upload corrupted on its way) is refused with ErrChecksum
// and stores nothing, in place of a new object or over an old one.
func testChecksummedPut(t *testing.T, s objstore.Store) {
	data, other := randomBytes(1, 100<<10), randomBytes(2, 100<<10)
	if err := s.Put(t.Context(), "checked/right", bytes.NewReader(data), objstore.PutOptions{Checksum: objstore.ChecksumOf(data)}); err != nil {
		t.Fatalf("Put with the checksum of its bytes: %v", err)
	}
	assertContent(t, s, "checked/right", data)
	for _, tc := range []struct {
		name string
		old  []byte
	}{{"new", nil}, {"overwrite", data}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "checked/wrong-" + tc.name
			if tc.old != nil {
				put(t, s, key, tc.old)
			}
			err := s.Put(t.Context(), key, bytes.NewReader(data), objstore.PutOptions{Checksum: objstore.ChecksumOf(other)})
			if !errors.Is(err, objstore.ErrChecksum) {
				t.Fatalf("Put with the checksum of other bytes: error = %v, want ErrChecksum", err)
			}
			if tc.old == nil {
				if _, err := s.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
					t.Errorf("Stat(%q) after a refused Put: error = %v, want ErrNotFound", key, err)
				}
				return
			}
			assertContent(t, s, key, tc.old)
		})
	}
}

// testCompose checks that Compose concatenates small sources byte for byte, in order, including
// empty and repeated ones, over an existing object too, and leaves the sources in place. S3
// uploads runs of sources this small through the client, and copies a last one alone.
func testCompose(t *testing.T, s objstore.Store) {
	sources := map[string][]byte{
		"seg/0": []byte("first segment\n"),
		"seg/1": {},
		"seg/2": randomBytes(3, 100_000),
		"seg/3": []byte("last segment\n"),
	}
	for key, data := range sources {
		put(t, s, key, data)
	}
	want := slices.Collect(maps.Keys(sources))
	for _, tc := range []struct {
		name string
		srcs []string
		old  []byte // stored under the destination before; nil: none
	}{
		{name: "several with an empty one", srcs: []string{"seg/0", "seg/1", "seg/2", "seg/3"}},
		{name: "a source twice", srcs: []string{"seg/3", "seg/0", "seg/3"}},
		{name: "one source", srcs: []string{"seg/2"}},
		{name: "only empty sources", srcs: []string{"seg/1", "seg/1"}},
		{name: "over an existing object", srcs: []string{"seg/3", "seg/0"}, old: randomBytes(4, 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := "out/" + strings.ReplaceAll(tc.name, " ", "-")
			want = append(want, dst)
			if tc.old != nil {
				put(t, s, dst, tc.old)
			}
			compose(t, s, dst, tc.srcs, objstore.PutOptions{})
			var content []byte
			for _, src := range tc.srcs {
				content = append(content, sources[src]...)
			}
			assertContent(t, s, dst, content)
		})
	}
	for key, data := range sources {
		assertContent(t, s, key, data)
	}
	assertKeys(t, s, "", want)
}

// testComposeLarge composes sources of S3's minimum part size (5 MiB), which S3 copies
// server-side as the parts of a multipart upload, and large sources after a small one, whose
// start (or all, if the rest is too small to copy) S3 uploads through the client with the small
// one, copying the rest from an offset. No case exceeds LargeObjectSize.
func testComposeLarge(t *testing.T, s objstore.Store) {
	const minPart = objstore.MinPartSize
	for i, tc := range []struct {
		name  string
		sizes []int
	}{
		{"each but the last at least 5 MiB", []int{minPart, minPart + 1, LargeObjectSize - 2*minPart - 1}},
		{"empty sources between and after", []int{minPart, 0, minPart, 0}},
		{"a small source first", []int{4321, minPart, 1}},
		{"a small source before one S3 splits", []int{4321, 2 * minPart}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fmt.Sprintf("large-%d/", i)
			var srcs []string
			var content []byte
			for j, size := range tc.sizes {
				key := fmt.Sprintf("%sseg-%d", dir, j)
				data := randomBytes(uint64(100*i+j), size)
				put(t, s, key, data)
				srcs = append(srcs, key)
				content = append(content, data...)
			}
			compose(t, s, dir+"composed", srcs, objstore.PutOptions{ContentType: "application/octet-stream"})
			assertContent(t, s, dir+"composed", content)
		})
	}
}

// testComposeMany composes more sources than one GCS compose request takes (32), so GCS composes
// in rounds through temporary objects, which must be gone afterwards.
func testComposeMany(t *testing.T, s objstore.Store) {
	const n, dst = 2*32 + 1, "many.log" // two runs of 32, and one source left over
	var srcs []string
	var content []byte
	for i := range n {
		key := fmt.Sprintf("many/seg-%03d", i)
		data := fmt.Appendf(nil, "segment %d\n", i)
		put(t, s, key, data)
		srcs = append(srcs, key)
		content = append(content, data...)
	}
	compose(t, s, dst, srcs, objstore.PutOptions{ContentType: "text/plain; charset=utf-8"})
	assertContent(t, s, dst, content)
	assertKeys(t, s, "", append(srcs, dst))
}

// testComposeGzipMembers composes gzip members, as live log capture stores each segment of a log,
// with the content type and encoding of a compressed log: the object reads back as the members'
// bytes, undecoded, decompresses as one stream to the segments' text, and carries the type and
// encoding (checked where the store reports them). S3 composes the small members through the
// client and those of at least 5 MiB server-side.
func testComposeGzipMembers(t *testing.T, s objstore.Store) {
	opts := objstore.PutOptions{ContentType: "text/plain; charset=utf-8", ContentEncoding: "gzip"}
	for i, tc := range []struct {
		name  string
		texts [][]byte
	}{
		{"small members", [][]byte{logLines("first", 2000), {}, logLines("second", 3)}},
		// Incompressible text, so each member but the last stays above 5 MiB.
		{"members of at least 5 MiB", [][]byte{randomBytes(11, objstore.MinPartSize), randomBytes(12, objstore.MinPartSize), logLines("last", 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fmt.Sprintf("gzip-%d/", i)
			var srcs []string
			var stored, text []byte
			for j, segment := range tc.texts {
				key := fmt.Sprintf("%ssegment-%d.log.gz", dir, j)
				member := gzipped(t, segment)
				if err := s.Put(t.Context(), key, bytes.NewReader(member), opts); err != nil {
					t.Fatalf("Put(%q): %v", key, err)
				}
				srcs = append(srcs, key)
				stored = append(stored, member...)
				text = append(text, segment...)
			}
			dst := dir + "main.log.gz"
			compose(t, s, dst, srcs, opts)
			assertContent(t, s, dst, stored)

			zr, err := gzip.NewReader(bytes.NewReader(get(t, s, dst))) // multistream: every member
			if err != nil {
				t.Fatalf("gzip header of %s: %v", dst, err)
			}
			got, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("decompress %s: %v", dst, err)
			}
			if !bytes.Equal(got, text) {
				t.Errorf("%s decompresses to %d bytes (sha256 %x), want the segments' %d bytes (sha256 %x)",
					dst, len(got), sha256.Sum256(got), len(text), sha256.Sum256(text))
			}

			ms, ok := s.(MetadataStore)
			if !ok {
				t.Log("store reports no content type or encoding; not checked")
				return
			}
			md, err := ms.Metadata(t.Context(), dst)
			if err != nil {
				t.Fatalf("Metadata(%q): %v", dst, err)
			}
			if diff := cmp.Diff(opts, md); diff != "" {
				t.Errorf("content type and encoding of %s (-want +got):\n%s", dst, diff)
			}
		})
	}
}

// testComposeMissingSource composes a list with a missing source past the first run of 32: the
// call must fail with ErrNotFound and leave the destination as it was, with no temporary object.
func testComposeMissingSource(t *testing.T, s objstore.Store) {
	var srcs []string
	for i := range 40 {
		key := fmt.Sprintf("m/seg-%02d", i)
		srcs = append(srcs, key)
		if i != 35 {
			put(t, s, key, []byte(key))
		}
	}
	for _, tc := range []struct {
		name string
		old  []byte // stored under the destination before; nil: none
	}{
		{"new key", nil},
		{"existing key", []byte("the old version survives")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := "out/" + strings.ReplaceAll(tc.name, " ", "-")
			var want []string
			if tc.old != nil {
				put(t, s, dst, tc.old)
				want = []string{dst}
			}
			err := s.Compose(t.Context(), dst, srcs, objstore.PutOptions{})
			if !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("Compose with a missing source: error = %v, want ErrNotFound", err)
			}
			t.Logf("Compose error (expected): %v", err)
			if tc.old != nil {
				assertContent(t, s, dst, tc.old)
			} else if _, err := s.Stat(t.Context(), dst); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("Stat(%q) after failed Compose: error = %v, want ErrNotFound", dst, err)
			}
			assertKeys(t, s, dst, want) // nor any temporary object named after it
		})
	}
}

// testComposeRefused checks the arguments no backend takes, which must change nothing: no
// sources, and the destination among the sources.
func testComposeRefused(t *testing.T, s objstore.Store) {
	put(t, s, "r/a", []byte("a"))
	put(t, s, "r/b", []byte("b"))
	for _, tc := range []struct {
		name string
		dst  string
		srcs []string
	}{
		{"nil sources", "r/out", nil},
		{"no sources", "r/out", []string{}},
		{"destination last source", "r/a", []string{"r/b", "r/a"}},
		{"destination only source", "r/a", []string{"r/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Compose(t.Context(), tc.dst, tc.srcs, objstore.PutOptions{})
			if err == nil {
				t.Fatalf("Compose(%q, %q) succeeded, want an error", tc.dst, tc.srcs)
			}
			t.Logf("Compose error (expected): %v", err)
		})
	}
	assertContent(t, s, "r/a", []byte("a"))
	assertContent(t, s, "r/b", []byte("b"))
	assertKeys(t, s, "", []string{"r/a", "r/b"})
}

func testURL(t *testing.T, s objstore.Store) {
	const key = "ns/job/pods/main.log.gz"
	u := s.URL(key)
	if !strings.Contains(u, "://") || !strings.HasSuffix(u, key) {
		t.Errorf("URL(%q) = %q, want scheme://.../%s", key, u, key)
	}
}

func put(t *testing.T, s objstore.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, bytes.NewReader(data), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func compose(t *testing.T, s objstore.Store, dst string, srcs []string, opts objstore.PutOptions) {
	t.Helper()
	if err := s.Compose(t.Context(), dst, srcs, opts); err != nil {
		t.Fatalf("Compose(%q, %d sources): %v", dst, len(srcs), err)
	}
}

func get(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return b
}

func list(t *testing.T, s objstore.Store, prefix string) []objstore.ObjectInfo {
	t.Helper()
	var got []objstore.ObjectInfo
	if err := s.List(t.Context(), prefix, func(o objstore.ObjectInfo) error {
		got = append(got, o)
		return nil
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

func assertContent(t *testing.T, s objstore.Store, key string, want []byte) {
	t.Helper()
	if got := get(t, s, key); !bytes.Equal(got, want) {
		t.Errorf("Get(%q) = %d bytes (sha256 %x), want %d bytes (sha256 %x)",
			key, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
	assertSize(t, s, key, int64(len(want)))
}

func assertSize(t *testing.T, s objstore.Store, key string, want int64) {
	t.Helper()
	info, err := s.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	if diff := cmp.Diff(objstore.ObjectInfo{Key: key, Size: want}, info); diff != "" {
		t.Errorf("Stat(%q) (-want +got):\n%s", key, diff)
	}
}

// assertKeys checks that the keys under prefix are want, in any order.
func assertKeys(t *testing.T, s objstore.Store, prefix string, want []string) {
	t.Helper()
	var got []string
	for _, o := range list(t, s, prefix) {
		got = append(got, o.Key)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(want)), got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("keys under %q (-want +got):\n%s", prefix, diff)
	}
}

// assertAbsentOr checks that key holds old, or no object at all when old is nil, and that no
// other object appeared.
func assertAbsentOr(t *testing.T, s objstore.Store, key string, old []byte) {
	t.Helper()
	var want []objstore.ObjectInfo
	if old == nil {
		if _, err := s.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Stat(%q) after failed Put: error = %v, want ErrNotFound", key, err)
		}
	} else {
		assertContent(t, s, key, old)
		want = []objstore.ObjectInfo{{Key: key, Size: int64(len(old))}}
	}
	if diff := cmp.Diff(want, list(t, s, "")); diff != "" {
		t.Errorf("List after failed Put (-want +got):\n%s", diff)
	}
}

// randomBytes returns n reproducible pseudo-random bytes: incompressible and distinct per seed.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	fill(rand.New(rand.NewPCG(seed, seed)), b)
	return b
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// logLines returns n numbered log lines starting with word.
func logLines(word string, n int) []byte {
	var b []byte
	for i := range n {
		b = fmt.Appendf(b, "%s line %d of a container's log\n", word, i)
	}
	return b
}

// gzipped returns b compressed as one gzip member.
func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
