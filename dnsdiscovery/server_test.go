package dnsdiscovery

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"
)

// zone is an in-process DNS server on loopback, over UDP and TCP, whose
// records and failures the test changes as it runs.
type zone struct {
	addr string
	mu   sync.Mutex
	rrs  map[string][]dns.RR // by "name type", name fully qualified
	// rcode answers every question about a name with this code;
	// hang answers none; truncate sets TC on UDP answers.
	rcode    map[string]int
	hang     map[string]bool
	truncate map[string]bool
	asked    map[string]int // questions by "name type net"
	// extra is added to every answer about a name, as a server that lies
	// adds records nobody asked for.
	extra map[string][]dns.RR
	// swap answers questions about a name as if about another: the
	// reply's question is the other's, and so are its records and code.
	swap map[string]string
}

func newZone(t *testing.T) *zone {
	t.Helper()
	z := &zone{rrs: map[string][]dns.RR{}, rcode: map[string]int{}, hang: map[string]bool{}, truncate: map[string]bool{}, asked: map[string]int{}, extra: map[string][]dns.RR{}, swap: map[string]string{}}
	// One port for UDP and TCP: a free UDP port may be taken for TCP, so
	// a few tries.
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ln == nil; try++ {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		z.addr = pc.LocalAddr().String()
		if ln, err = net.Listen("tcp", z.addr); err != nil {
			pc.Close()
			require.Less(t, try, 20, "no port free for both UDP and TCP: %v", err)
		}
	}
	udp := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(z.serve("udp"))}
	tcp := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(z.serve("tcp"))}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() {
		udp.Shutdown()
		tcp.Shutdown()
	})
	return z
}

// set replaces the records of each name and type given, in zone-file
// syntax ("a.test. 30 IN A 127.0.0.2").
func (z *zone) set(t *testing.T, records ...string) {
	t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	fresh := map[string]bool{}
	for _, s := range records {
		rr, err := dns.NewRR(s)
		require.NoError(t, err, s)
		k := strings.ToLower(rr.Header().Name) + " " + dns.TypeToString[rr.Header().Rrtype]
		if !fresh[k] {
			z.rrs[k], fresh[k] = nil, true
		}
		z.rrs[k] = append(z.rrs[k], rr)
	}
}

// drop removes every record of name.
func (z *zone) drop(name string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for k := range z.rrs {
		if strings.HasPrefix(k, dns.Fqdn(name)+" ") {
			delete(z.rrs, k)
		}
	}
}

// lie adds records to every answer about name.
func (z *zone) lie(t *testing.T, name string, records ...string) {
	t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, s := range records {
		rr, err := dns.NewRR(s)
		require.NoError(t, err, s)
		z.extra[dns.Fqdn(name)] = append(z.extra[dns.Fqdn(name)], rr)
	}
}

// flag sets a name's hang or truncate flag.
func (z *zone) flag(m map[string]bool, name string) {
	z.mu.Lock()
	m[dns.Fqdn(name)] = true
	z.mu.Unlock()
}

func (z *zone) fail(name string, rcode int) {
	z.mu.Lock()
	z.rcode[dns.Fqdn(name)] = rcode
	z.mu.Unlock()
}

func (z *zone) serve(network string) func(dns.ResponseWriter, *dns.Msg) {
	return func(w dns.ResponseWriter, req *dns.Msg) {
		if len(req.Question) != 1 {
			return
		}
		q := req.Question[0]
		name := strings.ToLower(q.Name)
		z.mu.Lock()
		if other, ok := z.swap[name]; ok {
			name = other
			req = req.Copy()
			req.Question[0].Name = other
		}
		z.asked[name+" "+dns.TypeToString[q.Qtype]+" "+network]++
		hang, rcode, trunc := z.hang[name], z.rcode[name], z.truncate[name] && network == "udp"
		rrs := append([]dns.RR(nil), z.rrs[name+" "+dns.TypeToString[q.Qtype]]...)
		cname := append([]dns.RR(nil), z.rrs[name+" CNAME"]...)
		exists := false
		for k := range z.rrs {
			if strings.HasPrefix(k, name+" ") {
				exists = true
			}
		}
		if len(cname) > 0 {
			target := strings.ToLower(cname[0].(*dns.CNAME).Target)
			rrs = append(cname, z.rrs[target+" "+dns.TypeToString[q.Qtype]]...)
		}
		rrs = append(rrs, z.extra[name]...)
		z.mu.Unlock()
		if hang {
			return
		}
		m := new(dns.Msg)
		m.SetReply(req)
		switch {
		case rcode != 0:
			m.Rcode = rcode
		case !exists:
			m.Rcode = dns.RcodeNameError
		case trunc:
			m.Truncated = true
		default:
			m.Answer = rrs
		}
		_ = w.WriteMsg(m)
	}
}
