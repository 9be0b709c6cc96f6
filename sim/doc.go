// Package sim is a deterministic discrete-event simulator of a cluster of
// backends behind client-side load balancers, built to compare the pickers
// of package balancer with each other and with oracles no real client could
// run.
//
// A run ([Run]) drives one [Scenario] under one [Policy] on a virtual clock:
// an event queue ordered by time and then by scheduling order, one
// goroutine, no sleeping. Requests arrive open loop (Poisson) at a load
// given as a fraction of the backends' capacity, and are spread over K
// independent clients, each with its own picker and peers. Backends are
// first-come first-served queues in front of c workers with exponential or
// lognormal service times whose mean follows a schedule (slowdowns, random
// redraws); they can fail fast or stall until the client's timeout. Pickers
// see the virtual clock through balancer.WithClock and a seeded source
// through balancer.WithRand, and get every attempt's outcome through Done,
// with the load report the backend sends with its reply (Outcome.Load: its
// requests in flight from every client, requests and errors per second and
// utilization over ReportWindow, as package loadreport's middleware
// reports them) unless the scenario sets NoReports.
// A failed attempt is retried at once on another peer as nginx's default
// proxy_next_upstream does, unless the scenario disables retries.
//
// A backend may be across a network (Backend.RTT): an attempt reaches it
// half the round trip after it is sent and the reply the client half a
// round trip after the backend ends it; the backend's report and count are
// its own view, of the jobs that have reached it. A picker that balances
// by probes ([Policy].Probed, Prequal) gets each client a
// balancer.Prober whose probes are events on the virtual clock: half a
// round trip after Probe the backend reads its requests in flight and its
// latency estimate at that count, as package loadreport's Tracker answers
// a probe, and half a round trip later the answer reaches the picker's
// Answer, on the run's goroutine; a stalled backend does not answer (the
// probe fails after [ProbeTimeout]), one failing fast does, with few
// requests and a short latency. Probes are counted per request and in
// server time ([ProbeCost] each, occupying no worker).
//
// The guard scenarios measure the guards of package balancer against the
// pickers without them, each picker of [GuardPickers] beside its
// variants ([Guard]): a retry storm (backends shedding load above a queue
// length, every client with its own retry budget on the virtual clock or
// none), a total outage of 1 s (with a panic threshold or nginx's
// defaults) and a scale-up (a backend joining cold, the pickers' Add at
// its join, with slow start or without). Each shows its measure over a
// window of arrival times ([Measure]): the load amplification, the failed
// share after the recovery, the p99 during the warm-up beside the p99
// before the join.
//
// Every random draw comes from its own PCG stream, seeded from the run's
// seed, the scenario and the draw's purpose, so a run is reproducible bit
// for bit, and every policy faces the same arrivals and request sizes: the
// differences between policies are not noise of the workload.
//
// [Compare] runs policies over scenarios and seeds and summarizes them with
// 95% confidence intervals; [Report.Write] prints the tables and
// [Report.Checks] measures a candidate picker against the targets of a
// latency-aware balancer. The scenarios ([Scenarios]) and the oracles
// ([Oracles]) follow the plan in the project's latency reference: uneven
// backends with a late bloomer, a brownout, fast-failing and stalling
// backends, randomly changing service times with one and sixteen clients,
// fleets whose speeds shift about every second under 1, 16 and 64
// clients, the 16-client fleet over two zones of 1 and 20 ms round trip,
// and with a backend failing fast for half the run; then the guard
// scenarios. Beside the clairvoyant oracle, a full-information one sees each
// backend's true requests in flight and current speed at the pick, but no
// service time in advance: the bound of what server-side load reports can
// tell a client.
// [CompareSubsets] compares subsettings (subset.Subset over each
// client's round robin) at the SRE book's fleet of 300 clients and 300
// backends with subsets of 30: connections per backend, requests per
// backend, latency, and the churn of scale events of ±10% backends
// delivered mid-run to every client's picker through Update.
// The engine checks itself against queueing theory: M/M/1 and M/M/c means
// and the square-root rule's T* ([SqrtSplit]) are reproduced within their
// confidence intervals in its tests.
//
// Run and Compare check their input before they allocate: a scenario that
// makes no sense is refused with ErrInvalid, and one whose expected
// requests or memory ([Scenario.Cost]) pass [MaxRequests], [MaxBytes] or,
// over a whole comparison, [MaxCompareRequests], with ErrTooLarge and the
// estimate.
//
// # Concurrency
//
// A run is single-threaded and owns everything it creates. Compare runs
// several at once on separate goroutines; the results do not depend on how
// many.
package sim
