package sim

import "fmt"

// The network between the clients and a backend with a round trip (far):
// an attempt reaches the backend up after it is sent, and its answer the
// client down after the backend ends it. Every client is as far from a
// backend as every other, so the attempts reach a backend in the order
// they were sent to it, and the first-come first-served schedule of its
// workers is known the moment an attempt is sent: serveFar draws it then,
// as serve does for a backend without a network, and the server's own
// view (its count of jobs, its idle workers, its report) follows the jobs
// as they reach it and end, each an event.

// job is an attempt on a backend across the network, as the backend sees
// it.
type job struct {
	req     int32  // the request
	gen     uint32 // the request's attempt: the slot may move on
	backend int32
	worker  int32 // the worker serving it; -1 for none (a fault, or unlimited workers)
	rif     int64 // the jobs the backend held when it arrived
	arrive  int64 // when it reaches the backend
	end     int64 // when the backend ends it
	mode    FaultMode
	// deliver: the answer reaches the client before its deadline, so the
	// backend's report at end rides on it.
	deliver bool
}

// serveFar starts request i's attempt on backend be across the network and
// returns, as serve does, when the client sees its end and whether it
// failed. The fault in force and the service are the backend's when the
// attempt reaches it; a stall ends on the server when the client's close
// reaches it, half a round trip after the client's deadline.
func (w *world) serveFar(be *backendState, i int32) (int64, bool) {
	q := &w.reqs[i]
	deadline := w.now + w.timeout
	arrive := w.now + be.up
	j := w.newJob()
	jb := &w.jobs[j]
	*jb = job{req: i, gen: q.gen, backend: q.backend, worker: -1, arrive: arrive}
	q.mode = 0
	var end int64
	if mode, prob := be.faultAt(arrive); prob > 0 && (prob >= 1 || be.flt.Float64() < prob) {
		q.mode = mode
		if mode == FastError {
			end = arrive + int64(FastErrorDelay)
		} else {
			end = deadline + be.up
		}
	} else {
		e, z := q.e, q.z
		if q.attempts > 1 {
			e, z = be.svc.ExpFloat64(), be.svc.NormFloat64()
		}
		start := arrive
		if be.workers != nil {
			k := be.earliest()
			start = max(start, be.workers[k])
			jb.worker = int32(k)
		}
		end = start + be.service(start, e, z)
		w.serviceTime += end - start
		if jb.worker >= 0 {
			be.workers[jb.worker] = end
		}
	}
	q.end = end
	jb.end, jb.mode = end, q.mode
	be.queued++
	w.push(event{at: arrive, kind: evJobArrive, req: j})
	if back := end + be.down; q.mode != Stall && back <= deadline {
		jb.deliver = true
		return back, q.mode != 0
	}
	return deadline, true
}

// jobArrive: job j reaches its backend, which counts it in flight and
// hands it to its worker.
func (w *world) jobArrive(j int32) {
	jb := &w.jobs[j]
	be := &w.backends[jb.backend]
	jb.rif = int64(be.arrived)
	be.arrived++
	if k := jb.worker; k >= 0 {
		// The worker's previous job ended at seen[k] (jobs reach it in
		// the order they were scheduled on it).
		if free := be.seen[k]; free < w.now {
			be.srv.idleUntil(free, w.now)
		}
		be.seen[k] = jb.end
	}
	w.push(event{at: jb.end, kind: evJobEnd, req: j})
}

// jobEnd: job j's backend ends it. If its answer will reach the client in
// time, the backend writes its report first, as the middleware writes its
// header before the handler returns; then it counts the job among the
// requests ended (and the errors, for a fault).
func (w *world) jobEnd(j int32) {
	jb := &w.jobs[j]
	be := &w.backends[jb.backend]
	if jb.deliver {
		q := &w.reqs[jb.req]
		if q.gen != jb.gen {
			w.err = fmt.Errorf("job of request %d attempt %d ended after the client moved on to attempt %d", jb.req, jb.gen, q.gen)
			return
		}
		be.fill(&q.load, w.now)
		q.loaded = true
	}
	be.srv.ended(jb.arrive, w.now, jb.rif, jb.mode != 0)
	be.arrived--
	be.queued--
	w.freeJobs = append(w.freeJobs, j)
}

// newJob returns a free slot of w.jobs.
func (w *world) newJob() int32 {
	if n := len(w.freeJobs); n > 0 {
		j := w.freeJobs[n-1]
		w.freeJobs = w.freeJobs[:n-1]
		return j
	}
	w.jobs = append(w.jobs, job{})
	return int32(len(w.jobs) - 1)
}
