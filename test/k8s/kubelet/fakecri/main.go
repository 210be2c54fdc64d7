// Command fakecri serves a fake container runtime (CRI) on a unix socket for a
// real kubelet in the test nodes: k8s.io/cri-client's in-memory fake, which
// "runs" every pod without any process, behind a gRPC server of ours that
//
//   - reports the runtime and network ready and the cgroup driver given,
//   - gives pulled images a size (kubelet rejects an image without one),
//   - makes StopContainer take the pod's grace period, up to --stop-delay-max,
//     as a process that ignores SIGTERM would, so kubelet's shutdown grace is
//     visible,
//   - logs one line per RunPodSandbox, CreateContainer, StopContainer and
//     StopPodSandbox with the pod's namespace/name (the journal shows them),
//   - forgets the fake's record of calls every few seconds (kubelet polls
//     every second; the record would grow without end).
//
// Test tooling only: it is built by test/k8s/build.sh kubelet.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

func main() {
	socket := flag.String("socket", "/run/fakecri/fakecri.sock", "unix socket to serve the CRI on")
	driver := flag.String("cgroup-driver", "cgroupfs", "cgroup driver to report to kubelet: cgroupfs or systemd (must match kubelet's cgroupDriver)")
	stopMax := flag.Duration("stop-delay-max", 30*time.Second, "longest time a StopContainer takes (it takes the request's timeout, the pod's grace period, up to this)")
	trim := flag.Duration("trim-every", 10*time.Second, "how often to forget the fake's record of calls")
	flag.Parse()
	log.SetFlags(0)

	var cd runtimeapi.CgroupDriver
	switch *driver {
	case "cgroupfs":
		cd = runtimeapi.CgroupDriver_CGROUPFS
	case "systemd":
		cd = runtimeapi.CgroupDriver_SYSTEMD
	default:
		log.Fatalf("fakecri: --cgroup-driver %q is neither cgroupfs nor systemd", *driver)
	}

	f := fake.NewFakeRemoteRuntime()
	f.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	f.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: cd}
	f.ImageService.SetFakeImageSize(1 << 20)

	srv := grpc.NewServer(grpc.UnaryInterceptor(interceptor(f, *stopMax)))
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	runtimeapi.RegisterImageServiceServer(srv, f)

	l, err := util.CreateListener("unix://" + *socket)
	if err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	go trimCalls(f, *trim)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		srv.Stop()
	}()
	log.Printf("fakecri: serving on %s (cgroup driver %s, stop delay up to %s)", *socket, *driver, *stopMax)
	if err := srv.Serve(l); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
}

// interceptor logs the calls that change a pod and delays StopContainer.
func interceptor(f *fake.RemoteRuntime, stopMax time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch r := req.(type) {
		case *runtimeapi.RunPodSandboxRequest:
			m := r.GetConfig().GetMetadata()
			logf("RunPodSandbox", m.GetNamespace()+"/"+m.GetName(), "")
		case *runtimeapi.CreateContainerRequest:
			m := r.GetSandboxConfig().GetMetadata()
			logf("CreateContainer", m.GetNamespace()+"/"+m.GetName(), "container "+r.GetConfig().GetMetadata().GetName())
		case *runtimeapi.StopPodSandboxRequest:
			logf("StopPodSandbox", sandboxPod(f, r.GetPodSandboxId()), "")
		case *runtimeapi.StopContainerRequest:
			pod := containerPod(f, r.GetContainerId())
			d := min(time.Duration(r.GetTimeout())*time.Second, stopMax)
			logf("StopContainer", pod, fmt.Sprintf("timeout %ds, taking %s", r.GetTimeout(), d))
			if running(f, r.GetContainerId()) && d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
			resp, err := handler(ctx, req)
			logf("StopContainer done", pod, "")
			return resp, err
		}
		return handler(ctx, req)
	}
}

// logf writes one line with the wall clock to the microsecond, so that it can
// be set beside the API server's audit log on one clock.
func logf(call, pod, extra string) {
	if extra != "" {
		extra = " " + extra
	}
	log.Printf("fakecri: %s %s pod %s%s", time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"), call, pod, extra)
}

func containerPod(f *fake.RemoteRuntime, id string) string {
	f.RuntimeService.Lock()
	defer f.RuntimeService.Unlock()
	if c, ok := f.RuntimeService.Containers[id]; ok {
		return c.Labels["io.kubernetes.pod.namespace"] + "/" + c.Labels["io.kubernetes.pod.name"]
	}
	return "?(" + id + ")"
}

func running(f *fake.RemoteRuntime, id string) bool {
	f.RuntimeService.Lock()
	defer f.RuntimeService.Unlock()
	c, ok := f.RuntimeService.Containers[id]
	return ok && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
}

func sandboxPod(f *fake.RemoteRuntime, id string) string {
	f.RuntimeService.Lock()
	defer f.RuntimeService.Unlock()
	if s, ok := f.RuntimeService.Sandboxes[id]; ok {
		return s.Metadata.GetNamespace() + "/" + s.Metadata.GetName()
	}
	return "?(" + id + ")"
}

// trimCalls drops the fake's record of calls, which nothing here reads.
func trimCalls(f *fake.RemoteRuntime, every time.Duration) {
	for range time.Tick(every) {
		f.RuntimeService.Lock()
		f.RuntimeService.Called = f.RuntimeService.Called[:0]
		f.RuntimeService.Unlock()
		f.ImageService.Lock()
		f.ImageService.Called = f.ImageService.Called[:0]
		f.ImageService.Unlock()
	}
}
