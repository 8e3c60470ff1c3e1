// nri-bench-driver: the runtime side of bench/bench_vs_go.py.
//
// It runs containerd's own runtime-side NRI code (pkg/adaptation), accepts one external
// plugin on -socket, synchronizes the payload's pods and containers -sync-rounds times
// (timing each call of the SyncCB containerd would be handed), then times -warmup + -n
// CreateContainer calls, each with a fresh container id. Events go to stdout as JSON
// lines: listening, synced, done. With -wait-stdin it holds after "synced" and after
// "done" until a line arrives on stdin, so the caller can read the plugin's RSS and CPU.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// payload is what bench_vs_go.py writes: protobuf JSON of the simulator's objects.
type payload struct {
	Pod            json.RawMessage   `json:"pod"`
	Container      json.RawMessage   `json:"container"`
	SyncPods       []json.RawMessage `json:"sync_pods"`
	SyncContainers []json.RawMessage `json:"sync_containers"`
}

// quiet drops the adaptation's log lines; only errors reach stderr.
type quiet struct{}

func (quiet) Debugf(context.Context, string, ...interface{}) {}
func (quiet) Infof(context.Context, string, ...interface{})  {}
func (quiet) Warnf(context.Context, string, ...interface{})  {}
func (quiet) Errorf(_ context.Context, format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri: "+format+"\n", args...)
}

func emit(event map[string]interface{}) {
	line, err := json.Marshal(event)
	if err != nil {
		fail("encode event: %v", err)
	}
	fmt.Println(string(line))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri-bench-driver: "+format+"\n", args...)
	os.Exit(1)
}

func readPayload(path string) (*api.PodSandbox, *api.Container, []*api.PodSandbox, []*api.Container) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	var p payload
	if err := json.Unmarshal(data, &p); err != nil {
		fail("payload: %v", err)
	}
	decode := protojson.UnmarshalOptions{DiscardUnknown: true}
	pod, ctr := &api.PodSandbox{}, &api.Container{}
	if err := decode.Unmarshal(p.Pod, pod); err != nil {
		fail("payload pod: %v", err)
	}
	if err := decode.Unmarshal(p.Container, ctr); err != nil {
		fail("payload container: %v", err)
	}
	pods := make([]*api.PodSandbox, len(p.SyncPods))
	for i, raw := range p.SyncPods {
		pods[i] = &api.PodSandbox{}
		if err := decode.Unmarshal(raw, pods[i]); err != nil {
			fail("payload sync pod %d: %v", i, err)
		}
	}
	ctrs := make([]*api.Container, len(p.SyncContainers))
	for i, raw := range p.SyncContainers {
		ctrs[i] = &api.Container{}
		if err := decode.Unmarshal(raw, ctrs[i]); err != nil {
			fail("payload sync container %d: %v", i, err)
		}
	}
	return pod, ctr, pods, ctrs
}

func percentile(sorted []int64, q float64) int64 {
	i := int(q*float64(len(sorted)-1) + 0.5)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func main() {
	socket := flag.String("socket", "", "unix socket the plugin connects to")
	payloadPath := flag.String("payload", "", "JSON payload written by bench_vs_go.py")
	n := flag.Int("n", 3000, "timed CreateContainer calls")
	warmup := flag.Int("warmup", 300, "untimed CreateContainer calls before the timed ones")
	syncRounds := flag.Int("sync-rounds", 5, "Synchronize calls on the plugin's connection")
	waitStdin := flag.Bool("wait-stdin", false, "hold after synced and done until a stdin line")
	rawPath := flag.String("raw", "", "write every timed round trip in ns to this file")
	syncGap := flag.Duration("sync-gap", 0, "pause before each Synchronize after the "+
		"first, so that each is timed on a plugin done with the one before (one that "+
		"restores its state after answering would be timed with the last restore)")
	requestTimeout := flag.Duration("request-timeout", 2*time.Second,
		"the plugin's deadline per request (containerd's default 2s); a longer one lets a "+
			"Synchronize that misses it be timed instead of dropping the plugin")
	flag.Parse()
	if *socket == "" || *payloadPath == "" {
		fail("-socket and -payload are required")
	}
	nri.SetPluginRequestTimeout(*requestTimeout)
	nrilog.Set(quiet{})
	pod, ctr, syncPods, syncCtrs := readPayload(*payloadPath)
	stdin := bufio.NewReader(os.Stdin)
	hold := func() {
		if *waitStdin {
			if _, err := stdin.ReadString('\n'); err != nil {
				fail("stdin: %v", err)
			}
		}
	}

	var syncUs []float64
	var lastSync time.Time // when the last Synchronize was sent
	synced := make(chan struct{})
	var once sync.Once
	var started atomic.Bool
	syncFn := func(ctx context.Context, cb nri.SyncCB) error {
		if !started.Load() { // Start() synchronizes the pre-installed plugins: none here
			_, err := cb(ctx, syncPods, syncCtrs)
			return err
		}
		for i := 0; i < *syncRounds; i++ {
			if i > 0 {
				time.Sleep(*syncGap)
			}
			start := time.Now()
			lastSync = start
			if _, err := cb(ctx, syncPods, syncCtrs); err != nil {
				return err
			}
			syncUs = append(syncUs, float64(time.Since(start).Nanoseconds())/1e3)
		}
		once.Do(func() { close(synced) })
		return nil
	}
	updateFn := func(context.Context, []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) {
		return nil, nil
	}
	dir, err := os.MkdirTemp("", "nri-bench-driver-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	r, err := nri.New("nri-bench-driver", "v0", syncFn, updateFn,
		nri.WithSocketPath(*socket),
		nri.WithPluginPath(filepath.Join(dir, "plugins")),
		nri.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		fail("adaptation: %v", err)
	}
	if err := r.Start(); err != nil {
		fail("start: %v", err)
	}
	defer r.Stop()
	started.Store(true)
	emit(map[string]interface{}{"event": "listening", "socket": *socket})

	select {
	case <-synced:
	case <-time.After(120 * time.Second):
		fail("no plugin synchronized within 120s")
	}
	// Ready: the first CreateContainer the plugin answers after the last Synchronize,
	// timed from that Synchronize's start (a plugin that answers first and restores after
	// answers it once restored). accept() lists the plugin right after syncFn returns;
	// until then a CreateContainer reaches no plugin and comes back without annotations
	// (both plugins answer the bench pod with their record).
	ctx := context.Background()
	var readyUs float64
	for i := 0; ; i++ {
		c := proto.Clone(ctr).(*api.Container)
		c.Id = ctr.Id + "-ready-" + strconv.Itoa(i)
		rpl, err := r.CreateContainer(ctx, &nri.CreateContainerRequest{Pod: pod, Container: c})
		if err != nil {
			fail("CreateContainer (ready) %d: %v", i, err)
		}
		if len(rpl.GetAdjust().GetAnnotations()) > 0 {
			readyUs = float64(time.Since(lastSync).Nanoseconds()) / 1e3
			break
		}
		if time.Since(lastSync) > 120*time.Second {
			fail("the plugin answered no CreateContainer within 120s of its Synchronize")
		}
	}
	emit(map[string]interface{}{"event": "synced", "sync_all_us": syncUs,
		"ready_us": readyUs})
	hold()

	create := func(i int) (*nri.CreateContainerResponse, time.Duration) {
		c := proto.Clone(ctr).(*api.Container)
		c.Id = ctr.Id + "-" + strconv.Itoa(i)
		start := time.Now()
		rpl, err := r.CreateContainer(ctx, &nri.CreateContainerRequest{Pod: pod, Container: c})
		took := time.Since(start)
		if err != nil {
			fail("CreateContainer %d: %v", i, err)
		}
		return rpl, took
	}
	probe, _ := create(0) // the adjustment both plugins must agree on
	first := map[string]interface{}{}
	if adj := probe.GetAdjust(); adj != nil {
		text, err := protojson.Marshal(adj)
		if err != nil {
			fail("encode adjustment: %v", err)
		}
		if err := json.Unmarshal(text, &first); err != nil {
			fail("decode adjustment: %v", err)
		}
	}
	for i := 1; i <= *warmup; i++ {
		create(i)
	}
	times := make([]int64, *n)
	for i := range times {
		_, took := create(*warmup + 1 + i)
		times[i] = took.Nanoseconds()
	}
	if *rawPath != "" {
		var b strings.Builder
		for _, t := range times {
			b.WriteString(strconv.FormatInt(t, 10))
			b.WriteByte('\n')
		}
		if err := os.WriteFile(*rawPath, []byte(b.String()), 0o644); err != nil {
			fail("%v", err)
		}
	}
	sorted := append([]int64(nil), times...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var sum int64
	for _, t := range times {
		sum += t
	}
	emit(map[string]interface{}{
		"event": "done", "calls": len(times),
		"p50_us":      float64(percentile(sorted, 0.5)) / 1e3,
		"p99_us":      float64(percentile(sorted, 0.99)) / 1e3,
		"mean_us":     float64(sum) / float64(len(times)) / 1e3,
		"sync_all_us": syncUs, "ready_us": readyUs, "first_adjustment": first,
	})
	hold()
}
