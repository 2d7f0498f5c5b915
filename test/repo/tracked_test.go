package repo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// maxTrackedSize is the size over which a tracked file needs an entry in
// largeFiles: anything bigger is most likely a build output, a capture or a
// data set that belongs outside the repository.
const maxTrackedSize = 1 << 20

// largeFiles lets a tracked file be bigger than maxTrackedSize. Each entry
// names the file and why it has to live in the tree at that size. Keep it
// short: an entry whose file is gone or has shrunk is reported too, so the
// list never outlives its reasons.
var largeFiles = map[string]string{
	// None today: the largest tracked file, the base image's layer under
	// images/base/blobs, is well under 1 MiB.
}

// trackedFile is what the check needs of one file in git's index.
type trackedFile struct {
	path string
	mode string // git's mode: 100644, 100755, 120000 (symlink)
	size int64
	head []byte // the first bytes of the content, enough to see a magic
}

// headLen is how much of each file trackedFiles keeps.
const headLen = 8

// binaryMagics are the first bytes of the executable formats Go builds.
var binaryMagics = []struct {
	name  string
	magic []byte
}{
	{"ELF", []byte("\x7fELF")},
	{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xce}},
	{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xcf}},
	{"Mach-O", []byte{0xce, 0xfa, 0xed, 0xfe}},
	{"Mach-O", []byte{0xcf, 0xfa, 0xed, 0xfe}},
	{"Mach-O universal", []byte{0xca, 0xfe, 0xba, 0xbe}},
	{"PE (MZ)", []byte("MZ")},
}

// builtOutputProblems decides, for the files git tracks, which must not be
// there: an executable that is not a script (no #! line), a file in an
// executable format whatever its mode, a file over maxTrackedSize that
// allow does not name, and an allow entry that no longer needs to be there.
func builtOutputProblems(files []trackedFile, allow map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range files {
		if f.mode == "120000" || f.mode == "160000" {
			continue // a symlink's or submodule's blob is a path or a commit
		}
		seen[f.path] = true
		if f.mode == "100755" && !bytes.HasPrefix(f.head, []byte("#!")) {
			out = append(out, f.path+": executable but not a script with a #! line")
		}
		for _, m := range binaryMagics {
			if bytes.HasPrefix(f.head, m.magic) {
				out = append(out, f.path+": a built "+m.name+" binary")
				break
			}
		}
		_, allowed := allow[f.path]
		switch {
		case f.size > maxTrackedSize && !allowed:
			out = append(out, fmt.Sprintf("%s: %d bytes, over %d and not in largeFiles", f.path, f.size, maxTrackedSize))
		case f.size <= maxTrackedSize && allowed:
			out = append(out, fmt.Sprintf("%s: in largeFiles but only %d bytes: drop the entry", f.path, f.size))
		}
	}
	for p := range allow {
		if !seen[p] {
			out = append(out, p+": in largeFiles but not tracked: drop the entry")
		}
	}
	return out
}

// trackedFiles lists the files in the git index of the checkout at dir,
// with each one's mode, size and first bytes as they would be committed.
func trackedFiles(t *testing.T, dir string) []trackedFile {
	t.Helper()
	ls, err := exec.Command("git", "-C", dir, "ls-files", "--stage", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []trackedFile
	var objects []string
	for _, entry := range strings.Split(strings.TrimSuffix(string(ls), "\x00"), "\x00") {
		meta, path, ok := strings.Cut(entry, "\t")
		fields := strings.Fields(meta)
		if !ok || len(fields) != 3 {
			t.Fatalf("git ls-files --stage: unexpected entry %q", entry)
		}
		if fields[2] != "0" && fields[2] != "2" {
			continue // a merge conflict's base and theirs: check ours only
		}
		files = append(files, trackedFile{path: path, mode: fields[0]})
		objects = append(objects, fields[1])
	}

	// One git cat-file reads every blob; only the first headLen bytes of
	// each are kept.
	cat := exec.Command("git", "-C", dir, "cat-file", "--batch")
	cat.Stdin = strings.NewReader(strings.Join(objects, "\n") + "\n")
	stdout, err := cat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(); err != nil {
		t.Fatalf("git cat-file: %v", err)
	}
	r := bufio.NewReader(stdout)
	for i := range files {
		header, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("git cat-file: reading %s: %v", files[i].path, err)
		}
		fields := strings.Fields(header) // <object> <type> <size>
		if len(fields) != 3 {
			t.Fatalf("git cat-file: %s: unexpected header %q", files[i].path, header)
		}
		size, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			t.Fatalf("git cat-file: %s: %v", files[i].path, err)
		}
		files[i].size = size
		files[i].head = make([]byte, min(size, headLen))
		if _, err := io.ReadFull(r, files[i].head); err != nil {
			t.Fatalf("git cat-file: %s: %v", files[i].path, err)
		}
		if _, err := r.Discard(int(size-int64(len(files[i].head))) + 1); err != nil { // the rest and the \n after it
			t.Fatalf("git cat-file: %s: %v", files[i].path, err)
		}
	}
	if err := cat.Wait(); err != nil {
		t.Fatalf("git cat-file: %v", err)
	}
	return files
}

// TestNoBuiltOutputsTracked checks what git tracks: no built binary, no
// executable that is not a script, and no file over 1 MiB unless largeFiles
// says why. .gitignore keeps the known build outputs out; this catches the
// ones it does not know.
func TestNoBuiltOutputsTracked(t *testing.T) {
	r := root(t)
	if _, err := os.Stat(filepath.Join(r, ".git")); err != nil {
		t.Skipf("%s is not a git checkout (%v): no tracked files to check", r, err)
	}
	files := trackedFiles(t, r)
	if len(files) == 0 {
		t.Fatal("git tracks no file")
	}
	for _, p := range builtOutputProblems(files, largeFiles) {
		t.Error(p)
	}
}

// TestBuiltOutputProblems checks the decision on files made up for each case.
func TestBuiltOutputProblems(t *testing.T) {
	big := int64(maxTrackedSize + 1)
	for name, tc := range map[string]struct {
		files []trackedFile
		allow map[string]string
		want  []string
	}{
		"a script with a #! line may be executable": {
			files: []trackedFile{{path: "hack/x.sh", mode: "100755", size: 20, head: []byte("#!/usr/bi")}},
		},
		"an executable without #! is reported": {
			files: []trackedFile{{path: "hack/x", mode: "100755", size: 5, head: []byte("echo")}},
			want:  []string{"hack/x: executable but not a script with a #! line"},
		},
		"an ELF binary is reported by mode and by magic": {
			files: []trackedFile{{path: "cmd/x/x", mode: "100755", size: 100, head: []byte("\x7fELF\x02\x01\x01\x00")}},
			want:  []string{"cmd/x/x: executable but not a script with a #! line", "cmd/x/x: a built ELF binary"},
		},
		"a Mach-O binary is reported without an executable bit": {
			files: []trackedFile{{path: "x", mode: "100644", size: 100, head: []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}}},
			want:  []string{"x: a built Mach-O binary"},
		},
		"a PE binary is reported": {
			files: []trackedFile{{path: "x.exe", mode: "100644", size: 100, head: []byte("MZ\x90\x00")}},
			want:  []string{"x.exe: a built PE (MZ) binary"},
		},
		"exactly 1 MiB is allowed": {
			files: []trackedFile{{path: "a.json", mode: "100644", size: maxTrackedSize, head: []byte("{")}},
		},
		"over 1 MiB is reported": {
			files: []trackedFile{{path: "a.json", mode: "100644", size: big, head: []byte("{")}},
			want:  []string{fmt.Sprintf("a.json: %d bytes, over %d and not in largeFiles", big, maxTrackedSize)},
		},
		"over 1 MiB with an allow entry passes": {
			files: []trackedFile{{path: "a.json", mode: "100644", size: big, head: []byte("{")}},
			allow: map[string]string{"a.json": "why"},
		},
		"an allow entry for a small file is stale": {
			files: []trackedFile{{path: "a.json", mode: "100644", size: 10, head: []byte("{")}},
			allow: map[string]string{"a.json": "why"},
			want:  []string{"a.json: in largeFiles but only 10 bytes: drop the entry"},
		},
		"an allow entry for an untracked file is stale": {
			allow: map[string]string{"gone.bin": "why"},
			want:  []string{"gone.bin: in largeFiles but not tracked: drop the entry"},
		},
		"a symlink's target is not content": {
			files: []trackedFile{{path: "link", mode: "120000", size: 4, head: []byte("MZ/x")}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, builtOutputProblems(tc.files, tc.allow)); d != "" {
				t.Errorf("problems (-want +got):\n%s", d)
			}
		})
	}
}

// TestTrackedFilesReadsTheIndex checks trackedFiles on a fresh repository:
// the mode, size and first bytes of what is staged, not of the work tree.
func TestTrackedFilesReadsTheIndex(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git: %v", err)
	}
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("run.sh", "#!/bin/sh\necho hi\n", 0o755)
	write("prog", "\x7fELF\x02\x01\x01\x00and more", 0o755)
	write("empty", "", 0o644)
	git("add", "run.sh", "prog", "empty")
	write("empty", "changed after staging", 0o644) // the index still holds ""

	got := trackedFiles(t, dir)
	want := []trackedFile{
		{path: "empty", mode: "100644", size: 0, head: []byte{}},
		{path: "prog", mode: "100755", size: 16, head: []byte("\x7fELF\x02\x01\x01\x00")},
		{path: "run.sh", mode: "100755", size: 18, head: []byte("#!/bin/s")},
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(trackedFile{})); d != "" {
		t.Errorf("trackedFiles (-want +got):\n%s", d)
	}
}
