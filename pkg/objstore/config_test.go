package objstore

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// clearCredentialEnv makes the tests independent of the S3 credentials of whoever runs them.
func clearCredentialEnv(t *testing.T) {
	t.Helper()
	for _, env := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"} {
		t.Setenv(env, "")
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	clearCredentialEnv(t)
	accessKey := writeFile(t, "access", "AKIA\n")
	secretKey := writeFile(t, "secret", "s3cr3t\n")
	notPEM := writeFile(t, "ca.pem", "not a certificate")
	s3OK := Config{Backend: BackendS3, S3: S3Config{Endpoint: "minio:9000", Bucket: "archive"},
		S3AccessKeyFile: accessKey, S3SecretKeyFile: secretKey}

	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // one substring per problem, in order
	}{
		{name: "fs", cfg: Config{Backend: BackendFS, FSRoot: "/var/lib/jobvault"}},
		{name: "fs is the default", cfg: Config{FSRoot: "/var/lib/jobvault"}},
		{name: "s3", cfg: s3OK},
		{name: "s3 with keys set in code", cfg: Config{Backend: BackendS3,
			S3: S3Config{Endpoint: "minio:9000", Bucket: "archive", AccessKey: "a", SecretKey: "s"}}},
		{name: "gcs", cfg: Config{Backend: BackendGCS, GCS: GCSConfig{Bucket: "archive"}}},
		{name: "fs without root", cfg: Config{}, want: []string{"--store-fs-root is required"}},
		{name: "fs locked", cfg: Config{FSRoot: "/var/lib/jobvault", LockMode: LockCompliance}},
		{name: "unknown lock mode", cfg: Config{FSRoot: "/var/lib/jobvault", LockMode: "GOVERNANCE"},
			want: []string{`--store-lock-mode: "GOVERNANCE" is not one of governance, compliance`}},
		{
			name: "every common problem",
			cfg:  Config{Backend: "azure", Timeouts: Timeouts{Call: -1, Transfer: -time.Second}},
			want: []string{
				"--store-timeout -1ns is negative",
				"--store-transfer-timeout -1s is negative",
				`--store-backend "azure" is not one of fs, s3, gcs`,
			},
		},
		{
			name: "every s3 problem",
			cfg: Config{Backend: BackendS3, S3: S3Config{
				Endpoint: "https://minio:9000", PartSize: 1 << 20, CAFile: notPEM, Secure: false,
			}},
			want: []string{
				`--store-s3-endpoint "https://minio:9000" must be host[:port]`,
				"--store-s3-bucket is required",
				"--store-s3-part-size 1048576 is outside",
				"--store-s3-ca-file is set but --store-s3-tls is false",
				"--store-s3-ca-file: read CA file " + notPEM + ": no PEM certificate found",
				"S3 credentials",
			},
		},
		{
			name: "s3 bad bucket, missing files",
			cfg: Config{Backend: BackendS3, S3: S3Config{Endpoint: "minio:9000", Bucket: "x", Secure: true, CAFile: "/nonexistent/ca.pem"},
				S3AccessKeyFile: "/nonexistent/access", S3SecretKeyFile: secretKey},
			want: []string{
				`--store-s3-bucket "x"`,
				"--store-s3-ca-file: read CA file: open /nonexistent/ca.pem",
				"read S3 access key: open /nonexistent/access",
			},
		},
		{
			name: "every gcs problem",
			cfg:  Config{Backend: BackendGCS, GCS: GCSConfig{ChunkSize: -1}},
			want: []string{"--store-gcs-bucket is required", "--store-gcs-chunk-size -1 is negative"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			got := problems(err)
			if len(got) != len(tc.want) {
				t.Fatalf("Validate() reported %d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, want := range tc.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

// problems splits the errors.Join that Validate returns into one message per problem.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []string{err.Error()}
	}
	var msgs []string
	for _, e := range joined.Unwrap() {
		msgs = append(msgs, e.Error())
	}
	return msgs
}

func TestBindFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Config
	}{
		{
			name: "defaults",
			want: Config{
				Backend:  BackendFS,
				Timeouts: Timeouts{Call: DefaultCallTimeout, Transfer: DefaultTransferTimeout},
				S3:       S3Config{Secure: true, PartSize: DefaultPartSize},
				GCS:      GCSConfig{ChunkSize: DefaultChunkSize},
			},
		},
		{
			name: "every flag",
			args: []string{
				"--store-backend=s3", "--store-timeout=10s", "--store-transfer-timeout=1h",
				"--store-fs-root=/data", "--store-s3-endpoint=minio:9000", "--store-s3-bucket=archive",
				"--store-s3-region=eu-1", "--store-s3-tls=false", "--store-s3-path-style",
				"--store-s3-ca-file=/ca.pem", "--store-s3-access-key-file=/keys/access",
				"--store-s3-secret-key-file=/keys/secret", "--store-s3-part-size=5242880",
				"--store-gcs-bucket=gcs-archive", "--store-gcs-chunk-size=8388608",
			},
			want: Config{
				Backend:         BackendS3,
				Timeouts:        Timeouts{Call: 10 * time.Second, Transfer: time.Hour},
				FSRoot:          "/data",
				S3:              S3Config{Endpoint: "minio:9000", Bucket: "archive", Region: "eu-1", PathStyle: true, CAFile: "/ca.pem", PartSize: 5 << 20},
				S3AccessKeyFile: "/keys/access",
				S3SecretKeyFile: "/keys/secret",
				GCS:             GCSConfig{Bucket: "gcs-archive", ChunkSize: 8 << 20},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Config
			flags := flag.NewFlagSet("test", flag.ContinueOnError)
			got.BindFlags(flags)
			if err := flags.Parse(tc.args); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Config (-want +got):\n%s", diff)
			}
		})
	}

	flags := flag.NewFlagSet("test", flag.ContinueOnError)
	new(Config).BindFlags(flags)
	flags.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "store-") || f.Usage == "" {
			t.Errorf("flag --%s: want the store- prefix and a usage text, got usage %q", f.Name, f.Usage)
		}
	})
}

func TestLoadS3Credentials(t *testing.T) {
	access := writeFile(t, "access", "  from-file\n")
	secret := writeFile(t, "secret", "secret-from-file\n")
	empty := writeFile(t, "empty", "\n")
	for _, tc := range []struct {
		name                   string
		accessFile, secretFile string
		env                    map[string]string
		wantAccess, wantSecret string
		wantErrs               []string
	}{
		{name: "files", accessFile: access, secretFile: secret, env: map[string]string{"AWS_ACCESS_KEY_ID": "ignored"},
			wantAccess: "from-file", wantSecret: "secret-from-file"},
		{name: "aws env", env: map[string]string{"AWS_ACCESS_KEY_ID": "aws", "AWS_SECRET_ACCESS_KEY": "aws-secret", "MINIO_ACCESS_KEY": "minio"},
			wantAccess: "aws", wantSecret: "aws-secret"},
		{name: "minio env", env: map[string]string{"MINIO_ACCESS_KEY": "minio", "MINIO_SECRET_KEY": "minio-secret"},
			wantAccess: "minio", wantSecret: "minio-secret"},
		{name: "file and env mixed", secretFile: secret, env: map[string]string{"MINIO_ACCESS_KEY": "minio"},
			wantAccess: "minio", wantSecret: "secret-from-file"},
		{name: "nothing", wantErrs: []string{"S3 access key: no file given and AWS_ACCESS_KEY_ID, MINIO_ACCESS_KEY unset",
			"S3 secret key: no file given and AWS_SECRET_ACCESS_KEY, MINIO_SECRET_KEY unset"}},
		{name: "bad files", accessFile: empty, secretFile: "/nonexistent", wantErrs: []string{"is empty", "open /nonexistent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearCredentialEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			a, s, err := LoadS3Credentials(tc.accessFile, tc.secretFile)
			if got := problems(err); len(got) != len(tc.wantErrs) {
				t.Fatalf("LoadS3Credentials error = %v, want %d problems", err, len(tc.wantErrs))
			} else {
				for i, want := range tc.wantErrs {
					if !strings.Contains(got[i], want) {
						t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
					}
				}
			}
			if a != tc.wantAccess || s != tc.wantSecret {
				t.Errorf("LoadS3Credentials = %q, %q; want %q, %q", a, s, tc.wantAccess, tc.wantSecret)
			}
		})
	}
}

func TestNew(t *testing.T) {
	clearCredentialEnv(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "a")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	// No network at construction: the emulator address need not answer.
	t.Setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:1")

	for _, tc := range []struct {
		cfg     Config
		wantURL string
	}{
		{Config{FSRoot: t.TempDir()}, "file:///"},
		{Config{Backend: BackendS3, S3: S3Config{Endpoint: "minio:9000", Bucket: "archive"}}, "s3://archive/k"},
		{Config{Backend: BackendGCS, GCS: GCSConfig{Bucket: "archive"}}, "gs://archive/k"},
	} {
		s, err := New(t.Context(), tc.cfg)
		if err != nil {
			t.Errorf("New(%s): %v", tc.cfg.Backend, err)
			continue
		}
		if got := s.URL("k"); !strings.HasPrefix(got, tc.wantURL) {
			t.Errorf("New(%s).URL(k) = %q, want prefix %q", tc.cfg.Backend, got, tc.wantURL)
		}
	}

	_, err := New(t.Context(), Config{Backend: BackendS3})
	if !strings.Contains(err.Error(), "--store-s3-endpoint is required") || !strings.Contains(err.Error(), "--store-s3-bucket is required") {
		t.Errorf("New with an invalid config: error = %v, want every problem listed", err)
	}
	if got := problems(errors.Unwrap(err)); len(got) != 2 {
		t.Errorf("New with an invalid config: %d problems, want 2: %q", len(got), got)
	}
}
