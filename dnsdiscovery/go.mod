module github.com/lbgo/balancer/dnsdiscovery

go 1.26

require (
	github.com/lbgo/balancer v0.0.0
	github.com/miekg/dns v1.1.73
	github.com/stretchr/testify v1.12.1
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/lbgo/balancer => ../
