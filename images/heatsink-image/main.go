// Command heatsink-image builds heatsink's OCI image and the end-to-end
// test's images without a Docker engine (see package images).
//
//	heatsink-image heatsink --binary B --version V --revision R --tag REF --out FILE
//	heatsink-image app      --binary B --title T --tag REF --out FILE
//	heatsink-image redis    --tag REF --out FILE
//	heatsink-image base     [--debs DIR] [--out images/base]
//
// The first three write a `docker save` tarball on the pinned base; base
// re-creates the base from Debian's packages (apt-get download, or the .deb
// files in DIR) and prints the digest to pin in images.BaseDigest.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/heatsink-dev/heatsink/images"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "heatsink":
		err = heatsink(os.Args[2:])
	case "app":
		err = app(os.Args[2:])
	case "redis":
		err = redis(os.Args[2:])
	case "base":
		err = base(os.Args[2:])
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "heatsink-image: unknown command %q\n", os.Args[1])
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "heatsink-image %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: heatsink-image <heatsink|app|redis|base> [flags]")
	os.Exit(2)
}

type common struct {
	fs             *flag.FlagSet
	base, tag, out *string
}

func newCommon(name string) common {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	return common{
		fs:   fs,
		base: fs.String("base", "images/base", "the pinned base image's OCI layout"),
		tag:  fs.String("tag", "", "the image's reference, e.g. ghcr.io/heatsink-dev/heatsink:0.1.0"),
		out:  fs.String("out", "", "the tarball to write"),
	}
}

func (c common) write(build func(base v1.Image) (v1.Image, error)) error {
	if *c.tag == "" || *c.out == "" {
		return fmt.Errorf("--tag and --out are required")
	}
	base, err := images.LoadBase(*c.base)
	if err != nil {
		return err
	}
	img, err := build(base)
	if err != nil {
		return err
	}
	if err := images.WriteTarball(*c.out, *c.tag, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", *c.out, *c.tag, d)
	return nil
}

func heatsink(args []string) error {
	c := newCommon("heatsink")
	binary := c.fs.String("binary", "", "the static heatsink binary, stamped with --version")
	h := images.Heatsink{}
	c.fs.StringVar(&h.Version, "version", "", "the release")
	c.fs.StringVar(&h.Revision, "revision", "", "the git commit")
	c.fs.StringVar(&h.Source, "source", "https://github.com/heatsink-dev/heatsink", "the source repository")
	_ = c.fs.Parse(args)
	return c.write(func(base v1.Image) (v1.Image, error) {
		b, err := os.ReadFile(*binary)
		if err != nil {
			return nil, err
		}
		h.Binary = b
		return images.BuildHeatsink(base, h)
	})
}

func app(args []string) error {
	c := newCommon("app")
	binary := c.fs.String("binary", "", "the static binary")
	title := c.fs.String("title", "", "the image's title")
	_ = c.fs.Parse(args)
	return c.write(func(base v1.Image) (v1.Image, error) {
		b, err := os.ReadFile(*binary)
		if err != nil {
			return nil, err
		}
		return images.App(base, b, *title)
	})
}

func redis(args []string) error {
	c := newCommon("redis")
	_ = c.fs.Parse(args)
	return c.write(func(base v1.Image) (v1.Image, error) {
		files, err := images.HostFiles("/usr/bin/redis-server", "/usr/bin/redis-cli")
		if err != nil {
			return nil, fmt.Errorf("%w (install redis-server and redis-tools)", err)
		}
		files = append(files, images.File{Path: "/data", Dir: true, Mode: 0o755, UID: images.NonRoot, GID: images.NonRoot})
		return images.Build(base, files, images.Config{
			Entrypoint: []string{"/usr/bin/redis-server"},
			WorkingDir: "/data",
			Labels:     map[string]string{"org.opencontainers.image.title": "redis (Debian's redis-server and redis-tools)"},
			History:    "COPY redis-server redis-cli and their libraries",
		})
	})
}

func base(args []string) error {
	fs := flag.NewFlagSet("base", flag.ExitOnError)
	debs := fs.String("debs", "", "a directory with the .deb files of "+fmt.Sprint(images.BasePackages)+" (default: apt-get download them)")
	out := fs.String("out", "images/base", "the OCI image layout to write (replaced)")
	_ = fs.Parse(args)
	dir := *debs
	if dir == "" {
		tmp, err := os.MkdirTemp("", "heatsink-base-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("apt-get", append([]string{"download"}, images.BasePackages...)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = tmp, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get download: %w", err)
		}
		dir = tmp
	}
	var pkgs []*images.Deb
	for _, p := range images.BasePackages {
		m, _ := filepath.Glob(filepath.Join(dir, p+"_*.deb"))
		if len(m) != 1 {
			return fmt.Errorf("want one %s_*.deb in %s, found %d", p, dir, len(m))
		}
		d, err := images.ReadDeb(m[0])
		if err != nil {
			return err
		}
		pkgs = append(pkgs, d)
	}
	img, err := images.BuildBase(pkgs...)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	d, err := images.WriteBase(*out, img)
	if err != nil {
		return err
	}
	fmt.Printf("base written to %s: pin it with\n\tconst BaseDigest = %q\n", *out, d.String())
	return nil
}
