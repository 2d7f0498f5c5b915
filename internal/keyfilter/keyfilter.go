// Package keyfilter matches Redis keys against a policy's include and exclude
// glob patterns. The syntax is Redis's own (as in KEYS and SCAN MATCH): '*'
// any run of bytes, '?' one byte, '[abc]', '[^a-z]' classes, '\' escapes the
// next byte. Matching is on bytes, never allocates and runs in time linear in
// the key for patterns with one '*', as keys are matched on the node agent's hot
// path.
package keyfilter

import (
	"fmt"
)

// Filter selects keys matching at least one include pattern and no exclude
// pattern. The zero Filter matches nothing; use Compile.
type Filter struct {
	include []pattern
	exclude []pattern
	all     bool
}

type pattern struct {
	raw string
	// literal prefix, when the pattern is "<prefix>*" (the common case), lets
	// Match skip the general matcher.
	prefix   string
	isPrefix bool
}

// Compile validates the patterns and builds a Filter. An empty include list
// means every key.
func Compile(include, exclude []string) (*Filter, error) {
	f := &Filter{}
	if len(include) == 0 {
		include = []string{"*"}
	}
	for i, p := range include {
		if err := Validate(p); err != nil {
			return nil, fmt.Errorf("include[%d]: %w", i, err)
		}
		if p == "*" {
			f.all = true
		}
		f.include = append(f.include, compile(p))
	}
	for i, p := range exclude {
		if err := Validate(p); err != nil {
			return nil, fmt.Errorf("exclude[%d]: %w", i, err)
		}
		f.exclude = append(f.exclude, compile(p))
	}
	return f, nil
}

func compile(p string) pattern {
	out := pattern{raw: p}
	if len(p) > 0 && p[len(p)-1] == '*' {
		head := p[:len(p)-1]
		if !hasMeta(head) {
			out.prefix, out.isPrefix = head, true
		}
	}
	return out
}

func hasMeta(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}

// Match reports whether key is selected.
func (f *Filter) Match(key string) bool {
	if f == nil {
		return false
	}
	in := f.all
	if !in {
		for i := range f.include {
			if f.include[i].match(key) {
				in = true
				break
			}
		}
	}
	if !in {
		return false
	}
	for i := range f.exclude {
		if f.exclude[i].match(key) {
			return false
		}
	}
	return true
}

func (p *pattern) match(key string) bool {
	if p.isPrefix {
		return len(key) >= len(p.prefix) && key[:len(p.prefix)] == p.prefix
	}
	return Match(p.raw, key)
}

// Validate reports a syntax error in a pattern: an unterminated class or a
// trailing escape. Redis itself accepts these silently and matches oddly; a
// policy should say what it means.
func Validate(p string) error {
	if p == "" {
		return fmt.Errorf("empty pattern")
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i+1 >= len(p) {
				return fmt.Errorf("pattern %q ends with an unfinished escape '\\'", p)
			}
			i++
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '^' {
				j++
			}
			closed := false
			for ; j < len(p); j++ {
				if p[j] == '\\' {
					j++
					continue
				}
				if p[j] == ']' {
					closed = true
					break
				}
			}
			if !closed {
				return fmt.Errorf("pattern %q has a '[' at byte %d with no closing ']'", p, i)
			}
			i = j
		}
	}
	return nil
}

// Match reports whether key matches the Redis glob pattern p. It uses the
// classic backtracking-on-last-star algorithm: linear for one '*', quadratic
// at worst, never exponential.
func Match(p, key string) bool {
	pi, ki := 0, 0
	starP, starK := -1, 0
	for ki < len(key) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '*':
				starP, starK = pi, ki
				pi++
				continue
			case '?':
				pi++
				ki++
				continue
			case '[':
				if ok, next := matchClass(p, pi, key[ki]); ok {
					pi = next
					ki++
					continue
				}
			case '\\':
				if pi+1 < len(p) && p[pi+1] == key[ki] {
					pi += 2
					ki++
					continue
				}
			default:
				if c == key[ki] {
					pi++
					ki++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starK++
		pi, ki = starP+1, starK
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchClass matches b against the class starting at p[i] == '['. It returns
// whether b matched and the index after the class.
func matchClass(p string, i int, b byte) (bool, int) {
	j := i + 1
	negate := false
	if j < len(p) && p[j] == '^' {
		negate, j = true, j+1
	}
	matched := false
	for ; j < len(p) && p[j] != ']'; j++ {
		lo := p[j]
		if lo == '\\' && j+1 < len(p) {
			j++
			lo = p[j]
		}
		hi := lo
		if j+2 < len(p) && p[j+1] == '-' && p[j+2] != ']' {
			hi = p[j+2]
			if hi == '\\' && j+3 < len(p) {
				j++
				hi = p[j+2]
			}
			j += 2
			if lo > hi {
				lo, hi = hi, lo
			}
		}
		if b >= lo && b <= hi {
			matched = true
		}
	}
	if j >= len(p) {
		return false, j // unterminated: never matches
	}
	return matched != negate, j + 1
}
