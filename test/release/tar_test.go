package release

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
)

// readTar reads file p (relative, as in a layer) from a tar stream.
func readTar(r io.Reader, p string) ([]byte, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("no %s", p)
		}
		if err != nil {
			return nil, err
		}
		if path.Clean(h.Name) == p {
			return io.ReadAll(tr)
		}
	}
}
