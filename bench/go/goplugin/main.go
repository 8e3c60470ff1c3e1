// nri-bench-goplugin: the Go side of bench/bench_vs_go.py, an NRI plugin on pkg/stub
// doing per event the work nri-sla does for the benchmark's SLA.
//
// CreateContainer: read sla.nri.io/pod and sla.nri.io/container.<name>, parse each with
// sigs.k8s.io/yaml's strict decoder (unknown keys refused), merge the container's document
// over the pod's, validate (enforcement, cpu.limit, cpu.period, memory.max as a Kubernetes
// quantity), answer the CPU quota/period and memory limit plus an sla.nri.io/applied
// record: compact key-sorted JSON closed by an HMAC-SHA256 over the container id and the
// text, the form nri-sla writes. Plans are memoised per annotation text (nri-sla's parser
// cache does the same); the record is made per container. Synchronize rebuilds the
// per-container state; RemoveContainer forgets it. -log writes one logrus line per
// decision, as nri-sla logs one by default.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

const (
	podKey       = "sla.nri.io/pod"
	containerKey = "sla.nri.io/container."
	appliedKey   = "sla.nri.io/applied"
	recordV      = 2
)

// document is one SLA annotation as written by a pod author.
type document struct {
	Enforcement *string `json:"enforcement,omitempty"`
	CPU         *struct {
		Limit  *float64 `json:"limit,omitempty"`
		Period *string  `json:"period,omitempty"`
	} `json:"cpu,omitempty"`
	Memory *struct {
		Max *string `json:"max,omitempty"`
	} `json:"memory,omitempty"`
}

// plan is what one SLA asks of the runtime.
type plan struct {
	enforcement string
	quota       int64 // us; 0: no CPU limit
	period      int64 // us
	memoryMax   int64 // bytes; 0: no memory limit
}

type planKey struct{ pod, ctr string }

type plugin struct {
	key    []byte
	cgroup int // the node's cgroup version, recorded as nri-sla records it
	log    bool
	mu     sync.Mutex
	plans  map[planKey]plan          // memo per annotation text
	live   map[string]*api.Container // per-container state: the containers the runtime reported
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox,
	ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	live := make(map[string]*api.Container, len(ctrs))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ctr := range ctrs {
		live[ctr.GetId()] = ctr
		if pod := byID[ctr.GetPodSandboxId()]; pod != nil {
			if _, err := p.planFor(pod, ctr); err != nil && p.log {
				logrus.WithField("container", ctr.GetName()).Warnf("sla: %v", err)
			}
		}
	}
	p.live = live
	return nil, nil
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox,
	ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, err := p.planFor(pod, ctr)
	if err != nil {
		return nil, nil, err
	}
	p.live[ctr.GetId()] = ctr
	if pl == nil {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	if pl.quota > 0 {
		adj.SetLinuxCPUQuota(pl.quota)
		adj.SetLinuxCPUPeriod(pl.period)
	}
	if pl.memoryMax > 0 {
		adj.SetLinuxMemoryLimit(pl.memoryMax)
	}
	adj.AddAnnotation(appliedKey, p.record(pl, ctr.GetId()))
	if p.log {
		logrus.WithFields(logrus.Fields{
			"pod": pod.GetNamespace() + "/" + pod.GetName(), "container": ctr.GetName(),
			"enforcement": pl.enforcement, "cpu_quota": pl.quota, "cpu_period": pl.period,
			"memory_max": pl.memoryMax}).Info("decision")
	}
	return adj, nil, nil
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.mu.Lock()
	delete(p.live, ctr.GetId())
	p.mu.Unlock()
	return nil
}

// planFor returns the container's plan (nil: no SLA), memoised per annotation text.
func (p *plugin) planFor(pod *api.PodSandbox, ctr *api.Container) (*plan, error) {
	k := planKey{pod.GetAnnotations()[podKey], pod.GetAnnotations()[containerKey+ctr.GetName()]}
	if k.pod == "" && k.ctr == "" {
		return nil, nil
	}
	if pl, ok := p.plans[k]; ok {
		return &pl, nil
	}
	merged := document{}
	for _, text := range []string{k.pod, k.ctr} {
		if text == "" {
			continue
		}
		var d document
		if err := yaml.UnmarshalStrict([]byte(text), &d); err != nil {
			return nil, fmt.Errorf("invalid SLA: %w", err)
		}
		if d.Enforcement != nil {
			merged.Enforcement = d.Enforcement
		}
		if d.CPU != nil {
			merged.CPU = d.CPU
		}
		if d.Memory != nil {
			merged.Memory = d.Memory
		}
	}
	pl, err := validate(merged)
	if err != nil {
		return nil, err
	}
	if len(p.plans) >= 512 { // bounded, as nri-sla's cache is
		p.plans = map[planKey]plan{}
	}
	p.plans[k] = pl
	return &pl, nil
}

func validate(d document) (plan, error) {
	pl := plan{enforcement: "hard", period: 100000}
	if d.Enforcement != nil {
		if *d.Enforcement != "hard" && *d.Enforcement != "soft" {
			return pl, fmt.Errorf("enforcement must be hard or soft")
		}
		pl.enforcement = *d.Enforcement
	}
	if c := d.CPU; c != nil {
		if c.Period != nil {
			if c.Limit == nil {
				return pl, fmt.Errorf("cpu.period needs cpu.limit")
			}
			period, err := time.ParseDuration(*c.Period)
			if err != nil || period < time.Millisecond || period > time.Second {
				return pl, fmt.Errorf("cpu.period must be a duration in 1ms..1s")
			}
			pl.period = period.Microseconds()
		}
		if c.Limit != nil {
			if *c.Limit <= 0 || *c.Limit > 1024 || math.IsNaN(*c.Limit) {
				return pl, fmt.Errorf("cpu.limit must be in (0, 1024]")
			}
			pl.quota = int64(math.Round(*c.Limit * float64(pl.period)))
			if pl.quota < 1000 {
				return pl, fmt.Errorf("cpu.limit x cpu.period must be at least 1ms")
			}
		}
	}
	if m := d.Memory; m != nil && m.Max != nil {
		q, err := resource.ParseQuantity(*m.Max)
		if err != nil || q.Sign() <= 0 {
			return pl, fmt.Errorf("memory.max must be a positive quantity")
		}
		pl.memoryMax = q.Value()
	}
	return pl, nil
}

// record is the sla.nri.io/applied text for container id: the body as compact JSON with
// sorted keys (encoding/json sorts map keys), then the MAC as the object's last member.
func (p *plugin) record(pl *plan, id string) string {
	body := map[string]interface{}{
		"v": recordV, "path": "nri", "enforcement": pl.enforcement, "cgroup_version": p.cgroup,
	}
	if pl.quota > 0 {
		body["cpu_quota"], body["cpu_period"] = pl.quota, pl.period
	}
	if pl.memoryMax > 0 {
		body["memory_max"] = pl.memoryMax
	}
	text, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	mac := hmac.New(sha256.New, p.key)
	mac.Write([]byte(id))
	mac.Write([]byte{0})
	mac.Write(text)
	return string(text[:len(text)-1]) + `,"mac":"` + hex.EncodeToString(mac.Sum(nil)) + `"}`
}

func main() {
	socket := flag.String("socket", "", "the runtime's NRI socket")
	logDecisions := flag.Bool("log", false, "one logrus line per decision")
	flag.Parse()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		fmt.Fprintln(os.Stderr, "nri-bench-goplugin:", err)
		os.Exit(1)
	}
	cgroup := 1
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		cgroup = 2
	}
	p := &plugin{key: key, cgroup: cgroup, log: *logDecisions,
		plans: map[planKey]plan{}, live: map[string]*api.Container{}}
	opts := []stub.Option{stub.WithPluginName("nri-bench-goplugin"), stub.WithPluginIdx("50")}
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nri-bench-goplugin:", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "nri-bench-goplugin:", err)
		os.Exit(1)
	}
}
