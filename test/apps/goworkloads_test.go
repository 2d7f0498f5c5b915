package apps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// A Go workload: application code over go-redis, played by one client per
// sidecar it is given, a round every tick, and checked for exactness at
// the end through the sidecar (what the application reads).
type goWorkload interface {
	name() string
	setup(ctx context.Context, c redis.UniversalClient) error
	// round plays one round of client i.
	round(ctx context.Context, i int, c redis.UniversalClient)
	// check reads the outcome and says whether it is exact, and what it
	// was.
	check(ctx context.Context, c redis.UniversalClient) (bool, string)
}

// goWorkloads are the application patterns, each with keys of its own.
func goWorkloads() []goWorkload {
	return []goWorkload{
		&jobQueue{key: "go:queue:jobs", popped: map[string]int{}},
		&leaderboard{key: "go:leaderboard", want: map[string]int64{}},
		&hashCounters{key: "go:stats:page", want: map[string]int64{}},
		&flagSet{key: "go:flags"},
		&productHash{key: "go:product:1"},
		&gcraLimiter{key: "go:lua:api", limit: redis_rate.PerSecond(gcraRate)},
		&fixedWindow{prefix: "go:window:", sent: map[string]int64{}, admitted: map[string]int64{}},
	}
}

// jobQueue: producers LPUSH job ids, workers RPOP them; every job pushed
// must be popped exactly once (the rest drained at the end).
type jobQueue struct {
	key    string
	mu     sync.Mutex
	pushed int
	popped map[string]int
	seq    [4]int
}

func (q *jobQueue) name() string { return "queue" }
func (q *jobQueue) setup(ctx context.Context, c redis.UniversalClient) error {
	return c.Del(ctx, q.key).Err()
}
func (q *jobQueue) round(ctx context.Context, i int, c redis.UniversalClient) {
	for range 10 {
		q.seq[i]++
		if c.LPush(ctx, q.key, fmt.Sprintf("job-%d-%d", i, q.seq[i])).Err() == nil {
			q.mu.Lock()
			q.pushed++
			q.mu.Unlock()
		}
	}
	for range 10 {
		if v, err := c.RPop(ctx, q.key).Result(); err == nil {
			q.mu.Lock()
			q.popped[v]++
			q.mu.Unlock()
		}
	}
}
func (q *jobQueue) check(ctx context.Context, c redis.UniversalClient) (bool, string) {
	for {
		v, err := c.RPop(ctx, q.key).Result()
		if err != nil {
			break
		}
		q.popped[v]++
	}
	twice := 0
	for _, n := range q.popped {
		if n != 1 {
			twice++
		}
	}
	ok := twice == 0 && len(q.popped) == q.pushed
	return ok, fmt.Sprintf("%d jobs pushed, %d distinct processed, %d more than once", q.pushed, len(q.popped), twice)
}

// leaderboard: ZINCRBY of 20 players, top-5 reads; every score must be the
// increments acknowledged.
type leaderboard struct {
	key  string
	mu   sync.Mutex
	want map[string]int64
	n    [4]int
	// Each client's own cheater scores 5 a round and is removed (ZREM)
	// every 15 rounds: cheat is its score since, rounds the client's.
	cheat  [4]int64
	rounds [4]int
}

func (l *leaderboard) name() string { return "leaderboard" }
func (l *leaderboard) setup(ctx context.Context, c redis.UniversalClient) error {
	return c.Del(ctx, l.key).Err()
}
func (l *leaderboard) round(ctx context.Context, i int, c redis.UniversalClient) {
	for range 10 {
		l.n[i]++
		p := "player-" + strconv.Itoa(l.n[i]%20)
		if c.ZIncrBy(ctx, l.key, 1, p).Err() == nil {
			l.mu.Lock()
			l.want[p]++
			l.mu.Unlock()
		}
	}
	for range 5 {
		_ = c.ZRevRangeWithScores(ctx, l.key, 0, 4).Err()
	}
	l.rounds[i]++
	cheater := "cheater-" + strconv.Itoa(i)
	if l.rounds[i]%15 == 0 && c.ZRem(ctx, l.key, cheater).Err() == nil {
		l.cheat[i] = 0
	}
	if c.ZIncrBy(ctx, l.key, 5, cheater).Err() == nil {
		l.cheat[i] += 5
	}
}
func (l *leaderboard) check(ctx context.Context, c redis.UniversalClient) (bool, string) {
	got, err := c.ZRangeWithScores(ctx, l.key, 0, -1).Result()
	if err != nil {
		return false, err.Error()
	}
	want := map[string]int64{}
	for p, n := range l.want {
		want[p] = n
	}
	for i, n := range l.cheat {
		if n > 0 {
			want["cheater-"+strconv.Itoa(i)] = n
		}
	}
	wrong, total := 0, int64(0)
	for _, z := range got {
		if int64(z.Score) != want[z.Member.(string)] {
			wrong++
		}
		total += int64(z.Score)
	}
	if len(got) != len(want) {
		wrong += len(want) - len(got)
	}
	return wrong == 0, fmt.Sprintf("%d players, total score %d, %d differ from the increments sent (ZREM of the cheaters included)", len(got), total, wrong)
}

// hashCounters: HINCRBY of 10 fields of a stats hash, HGETALL reads, and
// each client's own session counter, reset (HDEL) every 20 rounds as a
// limiter resets its count: every HINCRBY reply of it must be the count
// since its last reset.
type hashCounters struct {
	key  string
	mu   sync.Mutex
	want map[string]int64
	n    [4]int
	// sess is each client's session count since its reset, rounds its
	// rounds, badReplies the session HINCRBY replies that differed.
	sess       [4]int64
	rounds     [4]int
	badReplies int
}

func (h *hashCounters) name() string { return "stats" }
func (h *hashCounters) setup(ctx context.Context, c redis.UniversalClient) error {
	return c.Del(ctx, h.key).Err()
}
func (h *hashCounters) round(ctx context.Context, i int, c redis.UniversalClient) {
	for range 10 {
		h.n[i]++
		f := "views-" + strconv.Itoa(h.n[i]%10)
		if c.HIncrBy(ctx, h.key, f, 1).Err() == nil {
			h.mu.Lock()
			h.want[f]++
			h.mu.Unlock()
		}
	}
	for range 5 {
		_ = c.HGetAll(ctx, h.key).Err()
	}
	h.rounds[i]++
	sess := "session-" + strconv.Itoa(i)
	if h.rounds[i]%20 == 0 && c.HDel(ctx, h.key, sess).Err() == nil {
		h.sess[i] = 0
	}
	if v, err := c.HIncrBy(ctx, h.key, sess, 1).Result(); err == nil {
		h.sess[i]++
		if v != h.sess[i] {
			h.mu.Lock()
			h.badReplies++
			h.mu.Unlock()
		}
	}
}
func (h *hashCounters) check(ctx context.Context, c redis.UniversalClient) (bool, string) {
	got, err := c.HGetAll(ctx, h.key).Result()
	if err != nil {
		return false, err.Error()
	}
	wrong, total := h.badReplies, int64(0)
	var diffs []string
	for i, n := range h.sess {
		if v, _ := strconv.ParseInt(got["session-"+strconv.Itoa(i)], 10, 64); n != v {
			wrong++
			diffs = append(diffs, fmt.Sprintf("session-%d %d (want %d)", i, v, n))
		}
		if n > 0 {
			total += n
		}
	}
	for f, want := range h.want {
		n, _ := strconv.ParseInt(got[f], 10, 64)
		if n != want {
			wrong++
			diffs = append(diffs, fmt.Sprintf("%s %d (want %d)", f, n, want))
		}
		total += n
	}
	sessions := 0
	for _, n := range h.sess {
		if n > 0 {
			sessions++
		}
	}
	if h.badReplies > 0 {
		diffs = append(diffs, fmt.Sprintf("%d session HINCRBY replies", h.badReplies))
	}
	msg := fmt.Sprintf("%d fields, total %d, %d differ from the increments sent (HDEL of the sessions included)", len(got), total, wrong)
	if len(diffs) > 0 {
		slices.Sort(diffs)
		msg += ": " + strings.Join(diffs, ", ")
	}
	return wrong == 0 && len(got) == len(h.want)+sessions, msg
}

// flagSet: 20 feature flags in a set, read-hot SISMEMBER of 40 names;
// every answer must be right.
type flagSet struct {
	key   string
	mu    sync.Mutex
	reads int
	wrong int
	n     [4]int
}

func (f *flagSet) name() string { return "flags" }
func (f *flagSet) setup(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Del(ctx, f.key).Err(); err != nil {
		return err
	}
	for i := range 20 {
		if err := c.SAdd(ctx, f.key, "flag-"+strconv.Itoa(i)).Err(); err != nil {
			return err
		}
	}
	return nil
}
func (f *flagSet) round(ctx context.Context, i int, c redis.UniversalClient) {
	for range 20 {
		f.n[i]++
		k := f.n[i] % 40
		on, err := c.SIsMember(ctx, f.key, "flag-"+strconv.Itoa(k)).Result()
		if err != nil {
			continue
		}
		f.mu.Lock()
		f.reads++
		if on != (k < 20) {
			f.wrong++
		}
		f.mu.Unlock()
	}
}
func (f *flagSet) check(context.Context, redis.UniversalClient) (bool, string) {
	return f.wrong == 0, fmt.Sprintf("%d SISMEMBER answered, %d wrong", f.reads, f.wrong)
}

// productHash: a product's fields, read-hot HGETALL and HGET; every answer
// must be the product as written.
type productHash struct {
	key   string
	mu    sync.Mutex
	reads int
	wrong int
}

var product = map[string]string{"name": "kettle", "price": "39.90", "stock": "12", "colour": "red"}

func (p *productHash) name() string { return "product" }
func (p *productHash) setup(ctx context.Context, c redis.UniversalClient) error {
	return c.HSet(ctx, p.key, product).Err()
}
func (p *productHash) round(ctx context.Context, i int, c redis.UniversalClient) {
	for range 10 {
		all, err1 := c.HGetAll(ctx, p.key).Result()
		price, err2 := c.HGet(ctx, p.key, "price").Result()
		p.mu.Lock()
		if err1 == nil {
			p.reads++
			if len(all) != len(product) || all["name"] != product["name"] || all["stock"] != product["stock"] {
				p.wrong++
			}
		}
		if err2 == nil {
			p.reads++
			if price != product["price"] {
				p.wrong++
			}
		}
		p.mu.Unlock()
	}
}
func (p *productHash) check(context.Context, redis.UniversalClient) (bool, string) {
	return p.wrong == 0, fmt.Sprintf("%d reads answered, %d wrong", p.reads, p.wrong)
}

// gcraRate is the GCRA limiter's rate (and burst) per second: a quarter of
// what its clients ask.
const gcraRate = 50

// gcraLimiter: github.com/go-redis/redis_rate (a GCRA Lua script run by
// EVALSHA); its admissions over the run must not exceed burst + rate ×
// elapsed.
type gcraLimiter struct {
	key      string
	limit    redis_rate.Limit
	mu       sync.Mutex
	admitted int
	asked    int
	first    time.Time
	last     time.Time
}

func (g *gcraLimiter) name() string { return "lua" }
func (g *gcraLimiter) setup(ctx context.Context, c redis.UniversalClient) error {
	return redis_rate.NewLimiter(c).Reset(ctx, g.key)
}
func (g *gcraLimiter) round(ctx context.Context, i int, c redis.UniversalClient) {
	lim := redis_rate.NewLimiter(c)
	for range 10 {
		now := time.Now()
		res, err := lim.Allow(ctx, g.key, g.limit)
		g.mu.Lock()
		if g.first.IsZero() {
			g.first = now
		}
		g.last = time.Now()
		g.asked++
		if err == nil && res.Allowed > 0 {
			g.admitted++
		}
		g.mu.Unlock()
	}
}
func (g *gcraLimiter) check(context.Context, redis.UniversalClient) (bool, string) {
	elapsed := g.last.Sub(g.first).Seconds()
	bound := float64(g.limit.Burst) + float64(g.limit.Rate)*elapsed/g.limit.Period.Seconds() + 1
	return float64(g.admitted) <= bound, fmt.Sprintf("%d of %d admitted over %.1fs, bound %.0f (burst + rate × elapsed)", g.admitted, g.asked, elapsed, bound)
}

// windowLimit is the fixed-window limiter's admissions per 1-second window.
const windowLimit = 30

// fixedWindow: the hand-written limiter of go-redis' docs, INCR + EXPIRE in
// MULTI per 1-second window key; admitted while INCR's reply ≤ the limit.
// Per window: at most the limit admitted, the key's count equal to the
// INCRs sent, and every window key with its TTL.
type fixedWindow struct {
	prefix   string
	mu       sync.Mutex
	sent     map[string]int64
	admitted map[string]int64
}

func (w *fixedWindow) name() string                                       { return "window" }
func (w *fixedWindow) setup(context.Context, redis.UniversalClient) error { return nil }
func (w *fixedWindow) round(ctx context.Context, i int, c redis.UniversalClient) {
	for range 10 {
		key := w.prefix + strconv.FormatInt(time.Now().Unix(), 10)
		var incr *redis.IntCmd
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			incr = p.Incr(ctx, key)
			p.Expire(ctx, key, time.Minute)
			return nil
		})
		if err != nil {
			continue
		}
		w.mu.Lock()
		w.sent[key]++
		if incr.Val() <= windowLimit {
			w.admitted[key]++
		}
		w.mu.Unlock()
	}
}
func (w *fixedWindow) check(ctx context.Context, c redis.UniversalClient) (bool, string) {
	over, wrong, noTTL, admitted := 0, 0, 0, int64(0)
	for key, n := range w.sent {
		admitted += w.admitted[key]
		if w.admitted[key] > windowLimit {
			over++
		}
		v, err := c.Get(ctx, key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) || v != n {
			wrong++
		}
		if ttl, err := c.TTL(ctx, key).Result(); err != nil || ttl < 0 {
			noTTL++
		}
	}
	return over == 0 && wrong == 0 && noTTL == 0, fmt.Sprintf("%d windows, %d admitted (limit %d a window), %d over the limit, %d counts differ from the INCRs sent, %d without TTL",
		len(w.sent), admitted, windowLimit, over, wrong, noTTL)
}
