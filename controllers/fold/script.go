package fold

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// script is a Lua script and its source. When Redis' ACL refuses a command
// the script calls, the error names only the script's line ("The user
// executing the script can't run this command or subcommand script: <sha>,
// on @user_script:4."); run adds the command on that line, so that the
// policy's condition says which right the manager's user lacks.
type script struct {
	*redis.Script
	lines []string
}

func newScript(src string) *script {
	return &script{Script: redis.NewScript(src), lines: strings.Split(src, "\n")}
}

var (
	scriptLine = regexp.MustCompile(`@user_script:(\d+)`)
	callOf     = regexp.MustCompile(`redis\.call\('([A-Za-z]+)'`)
)

// run is Script.Run (EVALSHA, then EVAL if Redis lacks the script) with
// ACL refusals explained.
func (s *script) run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	cmd := s.Run(ctx, c, keys, args...)
	if err := cmd.Err(); err != nil && strings.Contains(err.Error(), "can't run this command") {
		if m := scriptLine.FindStringSubmatch(err.Error()); m != nil {
			// The source starts with a newline (the scripts open with
			// "`\n"), and Redis counts lines of the source from 1.
			n, _ := strconv.Atoi(m[1])
			if n >= 1 && n <= len(s.lines) {
				if call := callOf.FindStringSubmatch(s.lines[n-1]); call != nil {
					cmd.SetErr(fmt.Errorf("%w (the script calls %s there: the Redis user lacks +%s)", err, call[1], strings.ToLower(call[1])))
				}
			}
		}
	}
	return cmd
}
