package retrywindow

import (
	"math"
	"testing"
	"time"
)

// TestWindow_staleRecord: a withdrawer that loaded head in bucket 2 and
// was descheduled for a window records bucket 2's count after bucket 12's
// was recorded in the same word: the newer count stays.
func TestWindow_staleRecord(t *testing.T) {
	var w Window
	w.Init(0, 1, time.Second, func() time.Time { return time.Unix(100, 0) })
	steps := []struct {
		tag, n uint64
		want   uint64 // pastRetries(13) after the record
		why    string
	}{
		{12, 1, 1, "bucket 12's retry"},
		{2, 1, 1, "bucket 12's retry is kept"},
		{12, 3, 3, "a larger count of bucket 12"},
		{12, 2, 3, "the larger count of one bucket is kept"},
	}
	for _, s := range steps {
		w.record(s.tag, s.n)
		if got := w.pastRetries(13); got != s.want {
			t.Fatalf("record(%d, %d): pastRetries(13) = %d, want %d (%s)", s.tag, s.n, got, s.want, s.why)
		}
	}
}

// TestWindow_staleReader: a reader descheduled between its clock read and
// its use of it holds a time buckets behind the newest; a second clock
// read shows the clock did not step back, so the budget's time does not
// move (taking the stale read for a step back would move it forward by
// the stall, and retries would leave the window early). A clock that
// reads behind twice has stepped back: time goes on from the newest
// bucket. Buckets of 100 ms.
func TestWindow_staleReader(t *testing.T) {
	start := time.Unix(100, 0)
	var reads []time.Time // what the clock answers next, then start+500ms
	clock := func() time.Time {
		if len(reads) == 0 {
			return start.Add(500 * time.Millisecond)
		}
		r := reads[0]
		reads = reads[1:]
		return r
	}
	var w Window
	w.Init(0, 1, time.Second, clock)
	w.start = start // Init read the clock at +500 ms
	if got := w.Index(); got != 5 {
		t.Fatalf("Index at +500ms = %d, want 5", got)
	}

	reads = []time.Time{start.Add(200 * time.Millisecond)} // stale, then +500 ms
	if got := w.Index(); got != 5 {
		t.Errorf("Index after a stale read = %d, want 5", got)
	}
	if got := w.skew.Load(); got != 0 {
		t.Errorf("skew after a stale read = %d, want 0: a stale read is no step", got)
	}

	reads = []time.Time{start.Add(200 * time.Millisecond), start.Add(200 * time.Millisecond)}
	if got := w.Index(); got != 5 {
		t.Errorf("Index after a step back = %d, want 5", got)
	}
	if got, want := w.skew.Load(), int64(300*time.Millisecond); got != want {
		t.Errorf("skew after a step back = %d, want %d (a step back of 300 ms)", got, want)
	}
}

// TestWindow_refundsNeverWrap: refunds beyond the window's retries (a
// refund whose withdrawal has left the window, or one made with no
// withdrawal at all) leave the count at zero, not below it nor wrapped to
// 2^64-1 (which would refuse every retry), and Stats' Retries stops at 0.
// A reserve of 3 over a 1 s window: after 5 refunds and no retry, 3
// retries are allowed, as with none.
func TestWindow_refundsNeverWrap(t *testing.T) {
	now := time.Unix(100, 0)
	var w Window
	w.Init(0, 3, time.Second, func() time.Time { return now })
	for range 5 {
		w.Refund()
	}
	if got := w.Stats().Retries; got != 0 {
		t.Fatalf("Retries after refunds with no retry = %d, want 0", got)
	}
	got := 0
	for got < 100 && w.TryWithdraw() {
		got++
	}
	if got != 3 {
		t.Errorf("retries allowed = %d, want 3 (the reserve)", got)
	}
	if s := w.Stats(); s != (Stats{Retries: 3, Refused: 1}) {
		t.Errorf("Stats = %+v, want {Retries: 3, Refused: 1}", s)
	}
	// The saturated count: a word at countMask takes no more.
	var r ring
	r[0].Store(countMask)
	addAt(&r, 0)
	if got := sumAt(&r, 0); got != countMask {
		t.Errorf("a saturated bucket counts %d, want %d", got, countMask)
	}
	if countMask*Buckets >= math.MaxUint64 {
		t.Errorf("a window's sum of saturated buckets could wrap")
	}
}
