package kube

import (
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// fileToken is the bearer token embedded in a kubeconfig, read again
// whenever the file changes: the node agent renews the gate's short-lived
// token in /etc/gnsh/kubeconfig (internal/gatetoken) by replacing the
// file, and a client built before that (the agent's slot keeper, a long
// drain) must go on with the new token, not the one it started with.
type fileToken struct {
	path  string
	mu    sync.Mutex
	token string
	stamp fileStamp
}

type fileStamp struct {
	ino, size uint64
	mtime     time.Time
}

func stampOf(path string) (fileStamp, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	s := fileStamp{size: uint64(fi.Size()), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s, true
}

// get is the token: the one read last, read again if the file changed.
// A file that is gone or no longer holds an embedded token leaves the
// last one in use (the request then fails as it would have).
func (f *fileToken) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := stampOf(f.path)
	if !ok || s == f.stamp {
		return f.token
	}
	raw, err := clientcmd.LoadFromFile(f.path)
	if err != nil {
		return f.token
	}
	if ctx := raw.Contexts[raw.CurrentContext]; ctx != nil {
		if u := raw.AuthInfos[ctx.AuthInfo]; u != nil && u.Token != "" {
			f.token, f.stamp = u.Token, s
		}
	}
	return f.token
}

// tokenAuth sets the Authorization header from a fileToken on requests
// that have none.
type tokenAuth struct {
	src  *fileToken
	next http.RoundTripper
}

func (t *tokenAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return t.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+t.src.get())
	return t.next.RoundTrip(r)
}

// rereadToken makes the clients of a config built from the kubeconfig at
// path read its embedded token again when the file changes (see
// fileToken). token is the one the config was built with; the stamp is
// taken before it was read, so a change since is seen at the first request.
func rereadToken(path, token string, stamp fileStamp) func(http.RoundTripper) http.RoundTripper {
	src := &fileToken{path: path, token: token, stamp: stamp}
	return func(rt http.RoundTripper) http.RoundTripper { return &tokenAuth{src: src, next: rt} }
}
