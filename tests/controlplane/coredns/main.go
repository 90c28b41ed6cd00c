// CoreDNS for the real node's cluster: the API server's Services and pods under cluster.local, with
// only the plugins that needs (no forward: a name outside the cluster does not resolve).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func init() {
	dnsserver.Directives = []string{"errors", "cache", "kubernetes"} // in CoreDNS's own order
}

func main() {
	coremain.Run()
}
