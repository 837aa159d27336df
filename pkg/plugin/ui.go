package plugin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// uiFiles are the web viewer's templates and its static CSS and JS, compiled into the plugin so
// that `kubectl jobvault ui` needs nothing beside the binary.
//
//go:embed ui
var uiFiles embed.FS

// uiCookie carries the viewer's token once the printed URL was opened.
const uiCookie = "jobvault-ui"

// newUICommand is `ui`: a web viewer of the archive served on 127.0.0.1. The page talks to this
// process only; the process reads the archive API with the user's kubeconfig, so the viewer has
// no login of its own and shows exactly what the user may read.
func newUICommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var port int
	cmd := &cobra.Command{
		Use:   "ui [--port N]",
		Short: "Serve a web viewer of the archive on 127.0.0.1, reading with your own credentials",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(flags, streams.ErrOut)
			if err != nil {
				return err
			}
			v, err := newViewer(c)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("listen for the viewer: %w", err)
			}
			token, err := newToken()
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "Serving the archive viewer at http://%s/?token=%s (Ctrl-C to stop)\n", ln.Addr(), token)
			return serveUntilDone(cmd.Context(), ln, guard(ln.Addr().(*net.TCPAddr).Port, token, v.routes()))
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "The port on 127.0.0.1 to serve on; 0: a free one.")
	return cmd
}

// serveUntilDone serves h on ln until ctx ends.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return fmt.Errorf("serve the viewer: %w", err)
}

// newToken is the secret of the printed URL.
func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make the viewer's token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// guard lets through only the browser that opened the printed URL. The viewer reads with the
// user's credentials: another user of the machine can reach 127.0.0.1 too, and a web page the
// user visits can point a DNS name at it (rebinding), so every request must name the viewer's
// own host and carry the token, first in the URL (then kept in a cookie) and then in the cookie.
func guard(port int, token string, next http.Handler) http.Handler {
	hosts := map[string]bool{"127.0.0.1:" + strconv.Itoa(port): true, "localhost:" + strconv.Itoa(port): true}
	same := func(s string) bool { return subtle.ConstantTimeCompare([]byte(s), []byte(token)) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts[r.Host] {
			http.Error(w, "this viewer answers on 127.0.0.1 only", http.StatusForbidden)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && same(t) {
			http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if c, err := r.Cookie(uiCookie); err != nil || !same(c.Value) {
			http.Error(w, "open the URL kubectl jobvault ui printed (it carries the viewer's token)", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// viewer renders the archive's pages from the API's answers.
type viewer struct {
	c     *client
	pages map[string]*template.Template
}

func newViewer(c *client) (*viewer, error) {
	v := &viewer{c: c, pages: map[string]*template.Template{}}
	for _, page := range []string{"jobs", "job", "log", "error"} {
		t, err := template.New(page+".html").Funcs(uiFuncs).ParseFS(uiFiles, "ui/templates/layout.html", "ui/templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("parse the viewer's %s page: %w", page, err)
		}
		v.pages[page] = t
	}
	return v, nil
}

// routes are the viewer's pages, its download and its static files.
func (v *viewer) routes() http.Handler {
	static, err := fs.Sub(uiFiles, "ui/static")
	if err != nil {
		panic(err) // the embedded tree always holds ui/static
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/jobs?namespace="+url.QueryEscape(v.c.namespace), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /jobs", v.jobsPage)
	mux.HandleFunc("GET /jobs/{ns}/{name}", v.jobPage)
	mux.HandleFunc("GET /jobs/{ns}/{name}/log", v.logPage)
	mux.HandleFunc("GET /jobs/{ns}/{name}/log/download", v.download)
	return mux
}
