// Command karpenter-kwok runs Karpenter v1.15.0 with its kwok cloud provider for the tests, the
// way Karpenter's own kwok/main.go assembles it (operator options, kwok instance types, overlay,
// cluster state, controllers), with one difference: the controller manager serves metrics and
// health probes on 127.0.0.1 only. Karpenter's operator.NewOperator binds both on every address
// (":<METRICS_PORT>", ":<HEALTH_PROBE_PORT>") with no option for the host, and every server of
// these tests binds loopback only; so the manager is made here, from Karpenter's public packages,
// with the same options otherwise (METRICS_PORT, HEALTH_PROBE_PORT, DISABLE_LEADER_ELECTION,
// INSTANCE_TYPES_FILE_PATH, ... read by Karpenter's own option parser).
package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-logr/zapr"
	"github.com/samber/lo"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeoverlay"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/state/prediction"
	"sigs.k8s.io/karpenter/pkg/test"
)

func main() {
	ctx := injection.WithOptionsOrDie(context.Background(), options.Injectables...)
	opts := options.FromContext(ctx)
	logger := zapr.NewLogger(logging.NewLogger(ctx, "controller"))
	log.SetLogger(logger)
	klog.SetLogger(logger)
	ctx = log.IntoContext(ctx, logger)

	config := ctrl.GetConfigOrDie()
	config.QPS = float32(opts.KubeClientQPS)
	config.Burst = opts.KubeClientBurst
	config.UserAgent = operator.AppName + "/" + operator.Version

	mgr := lo.Must(ctrl.NewManager(config, ctrl.Options{
		Logger:                  logger,
		LeaderElection:          !opts.DisableLeaderElection,
		LeaderElectionID:        opts.LeaderElectionName,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		Metrics:                 server.Options{BindAddress: fmt.Sprintf("127.0.0.1:%d", opts.MetricsPort)},
		HealthProbeBindAddress:  fmt.Sprintf("127.0.0.1:%d", opts.HealthProbePort),
		BaseContext: func() context.Context {
			return log.IntoContext(injection.WithOptionsOrDie(context.Background(), options.Injectables...), logger)
		},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Field: fields.SelectorFromSet(fields.Set{"metadata.namespace": "kube-node-lease"})},
		}},
	}))
	// The field indexes Karpenter's controllers list by, from its exported test helpers, and the
	// pods-by-node index.
	lo.Must0(mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}))
	for _, index := range []func(cache.Cache) error{
		test.NodeProviderIDFieldIndexer(ctx),
		test.NodeClaimProviderIDFieldIndexer(ctx),
		test.NodeClaimNodeClassRefFieldIndexer(ctx),
		test.NodePoolNodeClassRefFieldIndexer(ctx),
		test.VolumeAttachmentFieldIndexer(ctx),
	} {
		lo.Must0(index(mgr.GetCache()))
	}
	lo.Must0(mgr.AddHealthzCheck("healthz", healthz.Ping))
	lo.Must0(mgr.AddReadyzCheck("manager", func(req *http.Request) error {
		return lo.Ternary(mgr.GetCache().WaitForCacheSync(req.Context()), nil, fmt.Errorf("caches not synced"))
	}))

	op := &operator.Operator{
		Manager:             mgr,
		KubernetesInterface: kubernetes.NewForConfigOrDie(config),
		EventRecorder:       events.NewRecorder(mgr.GetEventRecorderFor(operator.AppName)), //nolint:staticcheck
		Clock:               clock.RealClock{},
		InstanceTypeStore:   nodeoverlay.NewInstanceTypeStore(),
		PredictionStore:     prediction.NewStore(),
	}
	instanceTypes := lo.Must(kwok.ConstructInstanceTypes(ctx))
	undecorated := kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes)
	cloudProvider := overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	repairPolicies := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	cluster := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(repairPolicies))
	op.WithControllers(ctx, controllers.NewControllers(ctx, op.Manager, op.Clock, op.GetClient(),
		op.EventRecorder, cloudProvider, undecorated, cluster, op.InstanceTypeStore, op.PredictionStore)...).Start(ctx)
}
