package skew

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// matrixWidth is how many nodes a matrix runs at once: all of them.
const matrixWidth = 3

// TestMain lets a matrix's nodes run at once. Their subtests wait on
// processes and on the schedule's clock (about 30 s each, most of it the
// event's timeline), not on this process' CPU, while -parallel defaults
// to GOMAXPROCS: on a 2-core machine the third node would start only when
// the first two end and double the test's time. An explicit -parallel
// is kept.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && runtime.GOMAXPROCS(0) < matrixWidth {
		_ = flag.Set("test.parallel", strconv.Itoa(matrixWidth))
	}
	os.Exit(m.Run())
}
