package io.xinserve.spring.boot;

import static org.assertj.core.api.Assertions.assertThat;

import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import io.grpc.stub.StreamObserver;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.micrometer.tracing.Span;
import io.micrometer.tracing.TraceContext;
import io.micrometer.tracing.Tracer;
import io.micrometer.tracing.propagation.Propagator;
import io.micrometer.tracing.test.simple.SimpleTracer;
import io.xinserve.client.ResponseStream;
import io.xinserve.client.XinserveClient;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import io.xinserve.v1.Usage;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.actuate.health.CompositeHealthContributor;
import org.springframework.boot.actuate.health.HealthContributor;
import org.springframework.boot.actuate.health.HealthIndicator;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

class XinserveClientAutoConfigurationTest {
  private static final Metadata.Key<String> AUTH =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> TRACEPARENT =
      Metadata.Key.of("traceparent", Metadata.ASCII_STRING_MARSHALLER);

  private final String name = InProcessServerBuilder.generateName();
  private final LinkedBlockingQueue<Metadata> headers = new LinkedBlockingQueue<>();
  private final HealthStatusManager health = new HealthStatusManager();
  private Server server;

  /** Routes every auto-configured client to the in-process server. */
  private final XinserveClientCustomizer inProcess =
      (client, b) -> b.channelBuilder(InProcessChannelBuilder.forName(name));

  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(
              AutoConfigurations.of(
                  XinserveClientAutoConfiguration.class, XinserveHealthAutoConfiguration.class))
          .withBean(XinserveClientCustomizer.class, () -> inProcess);

  @BeforeEach
  void startServer() throws Exception {
    ServerInterceptor recorder =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata md, ServerCallHandler<Q, R> next) {
            headers.add(md);
            return next.startCall(call, md);
          }
        };
    InferenceServiceGrpc.InferenceServiceImplBase service =
        new InferenceServiceGrpc.InferenceServiceImplBase() {
          @Override
          public void generate(GenerateRequest r, StreamObserver<GenerateResponse> out) {
            if (r.getModel().equals("block")) {
              return; // answers never: only a cancel or a deadline ends the call
            }
            if (r.getModel().startsWith("unknown")) {
              out.onError(io.grpc.Status.NOT_FOUND.withDescription("no such model").asRuntimeException());
              return;
            }
            out.onNext(
                GenerateResponse.newBuilder()
                    .setUsage(Usage.newBuilder().setCompletionTokens(7))
                    .build());
            out.onCompleted();
          }

          @Override
          public void generateStream(GenerateRequest r, StreamObserver<GenerateStreamResponse> out) {
            if (r.getModel().equals("block")) {
              return; // sends nothing until cancelled
            }
            for (int i = 0; i < 3; i++) {
              out.onNext(GenerateStreamResponse.newBuilder().addTokenIds(i).addTokenIds(i).build());
            }
            out.onCompleted();
          }
        };
    server =
        InProcessServerBuilder.forName(name)
            .addService(ServerInterceptors.intercept(service, recorder))
            .addService(health.getHealthService())
            .addService(
                ServerInterceptors.intercept(
                    new io.xinserve.v1.ServerServiceGrpc.ServerServiceImplBase() {
                      @Override
                      public void getServerInfo(
                          io.xinserve.v1.GetServerInfoRequest r,
                          StreamObserver<io.xinserve.v1.GetServerInfoResponse> out) {
                        out.onNext(io.xinserve.v1.GetServerInfoResponse.getDefaultInstance());
                        out.onCompleted();
                      }
                    },
                    new ServerInterceptor() {
                      @Override
                      public <Q, R> ServerCall.Listener<Q> interceptCall(
                          ServerCall<Q, R> call, Metadata md, ServerCallHandler<Q, R> next) {
                        if ("Bearer bad".equals(md.get(AUTH))) {
                          call.close(io.grpc.Status.UNAUTHENTICATED.withDescription("bad token"), new Metadata());
                          return new ServerCall.Listener<>() {};
                        }
                        return next.startCall(call, md);
                      }
                    }))
            .build()
            .start();
  }

  @AfterEach
  void stopServer() throws Exception {
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }

  @Test
  void noAddressNoDefaultClient() {
    runner.run(
        ctx -> {
          assertThat(ctx).hasSingleBean(XinserveClients.class);
          assertThat(ctx).doesNotHaveBean(XinserveClient.class);
          assertThat(ctx.getBean(XinserveClients.class).asMap()).isEmpty();
        });
  }

  @Test
  void disabledConfiguresNothing() {
    runner
        .withPropertyValues("xinserve.client.enabled=false", "xinserve.client.address=x:1")
        .run(ctx -> assertThat(ctx).doesNotHaveBean(XinserveClients.class));
  }

  @Test
  void defaultAndNamedClientsWithInheritedToken() {
    runner
        .withPropertyValues(
            "xinserve.client.address=dns:///localhost:50051",
            "xinserve.client.plaintext=true",
            "xinserve.client.token=secret-1",
            "xinserve.client.clients.embed.address=dns:///embed:50051",
            "xinserve.client.clients.other.address=dns:///other:50051",
            "xinserve.client.clients.other.token=secret-2")
        .run(
            ctx -> {
              XinserveClients clients = ctx.getBean(XinserveClients.class);
              assertThat(clients.asMap()).containsOnlyKeys("default", "embed", "other");
              assertThat(ctx.getBean(XinserveClient.class)).isSameAs(clients.get("default"));

              clients.get("default").generate(GenerateRequest.newBuilder().setModel("m").build());
              assertThat(last().get(AUTH)).isEqualTo("Bearer secret-1");
              clients.get("embed").generate(GenerateRequest.newBuilder().setModel("m").build());
              assertThat(last().get(AUTH)).isEqualTo("Bearer secret-1"); // inherited
              clients.get("other").generate(GenerateRequest.newBuilder().setModel("m").build());
              assertThat(last().get(AUTH)).isEqualTo("Bearer secret-2");
            });
  }

  @Test
  void tokenFileIsReread(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
    java.nio.file.Path f = dir.resolve("token");
    java.nio.file.Files.writeString(f, "first\n", StandardCharsets.UTF_8);
    runner
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.token-file=" + f)
        .run(
            ctx -> {
              XinserveClient c = ctx.getBean(XinserveClient.class);
              c.generate(GenerateRequest.newBuilder().setModel("m").build());
              assertThat(last().get(AUTH)).isEqualTo("Bearer first");
              java.nio.file.Files.writeString(f, "second", StandardCharsets.UTF_8);
              java.nio.file.Files.setLastModifiedTime(
                  f, java.nio.file.attribute.FileTime.fromMillis(System.currentTimeMillis() + 5000));
              c.generate(GenerateRequest.newBuilder().setModel("m").build());
              assertThat(last().get(AUTH)).isEqualTo("Bearer second");
            });
  }

  @Test
  void userDefinedClientWinsAndIsTheRegistrysDefaultForHealthAndMetrics() {
    XinserveClient[] own = new XinserveClient[1];
    runner
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.clients.b.address=y:1")
        .withBean(
            "myClient",
            XinserveClient.class,
            () -> own[0] = XinserveClient.builder().channelBuilder(InProcessChannelBuilder.forName(name)).build())
        .run(
            ctx -> {
              assertThat(ctx.getBeansOfType(XinserveClient.class)).containsOnlyKeys("myClient");
              XinserveClients clients = ctx.getBean(XinserveClients.class);
              assertThat(clients.get("default")).isSameAs(own[0]);
              assertThat(clients.asMap()).containsOnlyKeys("default", "b");
              assertThat(ctx.getBean("xinserveHealthContributor"))
                  .isInstanceOf(CompositeHealthContributor.class);
              var composite = (CompositeHealthContributor) ctx.getBean("xinserveHealthContributor");
              health.setStatus("", ServingStatus.SERVING);
              assertThat(((HealthIndicator) composite.getContributor("default")).health().getStatus())
                  .isEqualTo(Status.UP);
            });
    // the registry leaves the application's client to its own bean definition
    assertThat(own[0]).isNotNull();
  }

  @Test
  void namedPlaintextClientIgnoresTheInheritedSslBundle() {
    runner
        .withPropertyValues(
            "xinserve.client.address=x:1",
            "xinserve.client.ssl.bundle=missing-bundle",
            "xinserve.client.clients.local.address=y:1",
            "xinserve.client.clients.local.plaintext=true")
        .withBean(org.springframework.boot.ssl.SslBundles.class, () -> new org.springframework.boot.ssl.DefaultSslBundleRegistry())
        .run(
            ctx -> {
              // the default client's bundle does not exist: it alone fails
              assertThat(ctx).hasFailed();
              assertThat(ctx.getStartupFailure())
                  .rootCause()
                  .hasMessageContaining("'default'")
                  .hasMessageContaining("missing-bundle");
            });
    runner
        .withPropertyValues(
            "xinserve.client.address=x:1",
            "xinserve.client.plaintext=false",
            "xinserve.client.ssl.bundle=missing-bundle",
            "xinserve.client.clients.local.address=y:1",
            "xinserve.client.clients.local.plaintext=true")
        .withBean(XinserveClientFactory.class, () -> new XinserveClientFactory(
            new org.springframework.boot.ssl.DefaultSslBundleRegistry(), List.of(), List.of(inProcess), n -> List.of()))
        .run(ctx -> assertThat(ctx).hasFailed());
    XinserveClientProperties props = new XinserveClientProperties();
    props.setAddress("x:1");
    props.getSsl().setBundle("missing-bundle");
    XinserveClientSettings local = new XinserveClientSettings();
    local.setAddress("y:1");
    local.setPlaintext(true);
    XinserveClientFactory factory =
        new XinserveClientFactory(
            new org.springframework.boot.ssl.DefaultSslBundleRegistry(), List.of(), List.of(inProcess), n -> List.of());
    // an explicit plaintext=true is not turned into TLS by the inherited bundle (it would fail
    // here, the bundle being unknown)
    try (XinserveClient c = factory.create("local", local, props)) {
      health.setStatus("", ServingStatus.SERVING);
      assertThat(c.checkHealth("", java.time.Duration.ofSeconds(30))).isEqualTo(ServingStatus.SERVING);
    }
  }

  @Test
  void configurationErrorsAreReportedByTheFailureAnalyzer() throws Exception {
    XinserveClientSettings none = new XinserveClientSettings();
    XinserveClientFactory factory = new XinserveClientFactory(null, List.of(), List.of(), n -> List.of());
    XinserveConfigurationException e =
        org.assertj.core.api.Assertions.catchThrowableOfType(
            XinserveConfigurationException.class, () -> factory.create("emb", none, null));
    assertThat(e.getMessage()).contains("'emb'", "address is not set");
    var analysis = new XinserveFailureAnalyzer().analyze(new RuntimeException("wrapper", e));
    assertThat(analysis).isNotNull();
    assertThat(analysis.getAction()).contains("xinserve.client.clients.emb.address");
    try (var in = getClass().getResourceAsStream("/META-INF/spring.factories")) {
      assertThat(new String(in.readAllBytes(), StandardCharsets.UTF_8))
          .contains("FailureAnalyzer", XinserveFailureAnalyzer.class.getName());
    }
  }

  @Test
  void healthWithAnInvalidTokenIsDownAndNamesTheTarget() {
    runner
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.token=bad")
        .run(
            ctx -> {
              HealthIndicator h =
                  (HealthIndicator) ctx.getBean("xinserveHealthContributor", HealthContributor.class);
              health.setStatus("", ServingStatus.SERVING);
              var result = h.health();
              assertThat(result.getStatus()).isEqualTo(Status.DOWN);
              assertThat(result.getDetails())
                  .containsEntry("code", "UNAUTHENTICATED")
                  .containsEntry("target", "x:1");
            });
  }

  @Test
  void healthIndicatorHonoursManagementHealthEnabled() {
    runner
        .withPropertyValues("xinserve.client.address=x:1", "management.health.xinserve.enabled=false")
        .run(ctx -> assertThat(ctx).doesNotHaveBean("xinserveHealthContributor"));
  }

  @Test
  void aFailedCheckWhileTheChannelIsStillConnectingIsUnknown() {
    XinserveClient c =
        XinserveClient.builder()
            .target("dns:///127.0.0.1:1")
            .plaintext()
            .retryPolicy(io.xinserve.client.RetryPolicy.none())
            .build();
    try (c) {
      // a new channel is IDLE: the first check cannot tell "down" from "not connected yet"
      var result = new XinserveHealthIndicator(c, "", java.time.Duration.ofMillis(1)).health();
      assertThat(result.getStatus()).isIn(Status.UNKNOWN);
      assertThat(result.getDetails()).containsEntry("target", "dns:///127.0.0.1:1");
    }
  }

  @Test
  void theFirstCheckOfARefusingPortIsDownNamingTheError() {
    XinserveClient c =
        XinserveClient.builder()
            .target("dns:///127.0.0.1:1")
            .plaintext()
            .retryPolicy(io.xinserve.client.RetryPolicy.none())
            .build();
    try (c) {
      // the first connection attempt is refused within the check's deadline: DOWN, not UNKNOWN
      var result = new XinserveHealthIndicator(c, "", java.time.Duration.ofSeconds(20)).health();
      assertThat(result.getStatus()).isEqualTo(Status.DOWN);
      assertThat(result.getDetails()).containsEntry("code", "UNAVAILABLE");
      assertThat((String) result.getDetails().get("error"))
          .startsWith("io.xinserve.client.errors.UnavailableException: ");
    }
  }

  @Test
  void eachCallIsAMicrometerObservation() {
    List<String> stopped = new java.util.concurrent.CopyOnWriteArrayList<>();
    io.micrometer.observation.ObservationRegistry registry = io.micrometer.observation.ObservationRegistry.create();
    registry.observationConfig().observationHandler(
        new io.micrometer.observation.ObservationHandler<io.micrometer.observation.Observation.Context>() {
          @Override
          public boolean supportsContext(io.micrometer.observation.Observation.Context context) {
            return true;
          }

          @Override
          public void onStop(io.micrometer.observation.Observation.Context context) {
            stopped.add(context.getName() + " " + context.getContextualName());
          }
        });
    runner
        .withPropertyValues("xinserve.client.address=x:1")
        .withBean(io.micrometer.observation.ObservationRegistry.class, () -> registry)
        .run(
            ctx -> {
              ctx.getBean(XinserveClient.class).generate(GenerateRequest.newBuilder().setModel("m").build());
              long deadline = System.currentTimeMillis() + 60_000;
              while (stopped.isEmpty() && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
              }
              assertThat(stopped).contains("grpc.client xinserve.v1.InferenceService/Generate");
            });
  }

  @Test
  void theStarterRefusesAnotherSpringBootGeneration() {
    BootGeneration.require("3.5.7", 3, "xinserve-spring-boot-starter", "xinserve-spring-boot4-starter");
    BootGeneration.require(null, 3, "xinserve-spring-boot-starter", "xinserve-spring-boot4-starter");
    org.assertj.core.api.Assertions.assertThatThrownBy(
            () -> BootGeneration.require("4.0.7", 3, "xinserve-spring-boot-starter", "xinserve-spring-boot4-starter"))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("Spring Boot 4.0.7")
        .hasMessageContaining("xinserve-spring-boot4-starter");
    // the running Boot is 3.x: the auto-configuration starts
    assertThat(org.springframework.boot.SpringBootVersion.getVersion()).startsWith("3.");
    // the jar says what it was built for, and that is what runs here
    assertThat(BootGeneration.builtFor().getProperty("artifact")).isEqualTo("xinserve-spring-boot-starter");
    assertThat(BootGeneration.builtFor().getProperty("spring-boot.version")).startsWith("3.");
    BootGeneration.requireBuiltGeneration();
  }

  @Test
  void healthFollowsGrpcHealth() {
    runner
        .withPropertyValues("xinserve.client.address=x:1")
        .run(
            ctx -> {
              HealthIndicator h =
                  (HealthIndicator) ctx.getBean("xinserveHealthContributor", HealthContributor.class);
              health.setStatus("", ServingStatus.SERVING);
              assertThat(h.health().getStatus()).isEqualTo(Status.UP);
              health.setStatus("", ServingStatus.NOT_SERVING);
              assertThat(h.health().getStatus()).isEqualTo(Status.OUT_OF_SERVICE);
              server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
              assertThat(h.health().getStatus()).isEqualTo(Status.DOWN);
              assertThat(h.health().getDetails()).containsEntry("code", "UNAVAILABLE");
            });
  }

  @Test
  void severalClientsGiveACompositeHealth() {
    runner
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.clients.b.address=y:1")
        .run(
            ctx ->
                assertThat(ctx.getBean("xinserveHealthContributor"))
                    .isInstanceOf(CompositeHealthContributor.class));
  }

  @Test
  void metricsRecordCallsTokensTimeToFirstTokenAndCancellations() {
    runner
        .withPropertyValues("xinserve.client.address=x:1")
        .withBean(MeterRegistry.class, SimpleMeterRegistry::new)
        .run(
            ctx -> {
              MeterRegistry reg = ctx.getBean(MeterRegistry.class);
              XinserveClient c = ctx.getBean(XinserveClient.class);
              c.generate(GenerateRequest.newBuilder().setModel("m").build());
              try (ResponseStream<GenerateStreamResponse> s =
                  c.generateStream(GenerateRequest.newBuilder().setModel("m").build())) {
                s.forEachRemaining(x -> {});
              }
              String gen = "xinserve.v1.InferenceService/Generate";
              String stream = "xinserve.v1.InferenceService/GenerateStream";
              assertThat(reg.get("xinserve.client.calls").tags("method", gen, "status", "OK").timer().count())
                  .isEqualTo(1);
              assertThat(reg.get("xinserve.client.tokens").tags("method", gen).counter().count()).isEqualTo(7);
              assertThat(reg.get("xinserve.client.tokens").tags("method", stream).counter().count()).isEqualTo(6);
              assertThat(reg.get("xinserve.client.time.to.first.token").tags("method", stream).timer().count())
                  .isEqualTo(1);
              assertThat(reg.get("xinserve.client.tokens.per.second").tags("method", stream).summary().count())
                  .isEqualTo(1);
              // a cancelled call is counted: the server never answers "block", so the cancel races
              // nothing
              var f = c.generateAsync(GenerateRequest.newBuilder().setModel("block").build());
              f.cancel(true);
              c.generateStream(GenerateRequest.newBuilder().setModel("block").build()).close();
              long deadline = System.currentTimeMillis() + 60_000;
              while (cancellations(reg) < 2 && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
              }
              // "block" never got an answer, so it is not a tag value of its own
              assertThat(reg.get("xinserve.client.cancellations").tags("method", gen, "model", "other").counter().count())
                  .isEqualTo(1);
              assertThat(reg.get("xinserve.client.cancellations").tags("method", stream, "model", "other").counter().count())
                  .isEqualTo(1);
              assertThat(reg.get("xinserve.client.calls").tags("method", gen, "model", "m").timer().count())
                  .isEqualTo(1);
            });
  }

  @Test
  void theModelTagHoldsOnlyNamesTheServerAccepted() {
    runner
        .withPropertyValues("xinserve.client.address=x:1")
        .withBean(MeterRegistry.class, SimpleMeterRegistry::new)
        .run(
            ctx -> {
              MeterRegistry reg = ctx.getBean(MeterRegistry.class);
              XinserveClient c = ctx.getBean(XinserveClient.class);
              for (int i = 0; i < 100; i++) {
                String model = "unknown-" + i;
                org.assertj.core.api.Assertions.assertThatThrownBy(
                        () -> c.generate(GenerateRequest.newBuilder().setModel(model).build()))
                    .isInstanceOf(io.xinserve.client.errors.NotFoundException.class);
              }
              c.generate(GenerateRequest.newBuilder().setModel("m").build());
              c.generate(GenerateRequest.newBuilder().setModel("m").build());
              String gen = "xinserve.v1.InferenceService/Generate";
              assertThat(
                      reg.find("xinserve.client.calls").tags("method", gen).timers().stream()
                          .map(t -> t.getId().getTag("model"))
                          .distinct()
                          .sorted()
                          .toList())
                  .containsExactly("m", "other");
              assertThat(reg.get("xinserve.client.calls").tags("model", "other", "status", "NOT_FOUND").timer().count())
                  .isEqualTo(100);
              assertThat(reg.get("xinserve.client.calls").tags("model", "m", "status", "OK").timer().count())
                  .isEqualTo(2);
            });
  }

  @Test
  void traceparentOfTheCurrentSpanIsPropagated() {
    SimpleTracer tracer = new SimpleTracer();
    Propagator w3c =
        new Propagator() {
          @Override
          public List<String> fields() {
            return List.of("traceparent");
          }

          @Override
          public <C> void inject(TraceContext ctx, C carrier, Setter<C> setter) {
            setter.set(carrier, "traceparent", "00-" + ctx.traceId() + "-" + ctx.spanId() + "-01");
          }

          @Override
          public <C> Span.Builder extract(C carrier, Getter<C> getter) {
            throw new UnsupportedOperationException();
          }
        };
    runner
        .withPropertyValues("xinserve.client.address=x:1")
        .withBean(Tracer.class, () -> tracer)
        .withBean(Propagator.class, () -> w3c)
        .run(
            ctx -> {
              XinserveClient c = ctx.getBean(XinserveClient.class);
              Span span = tracer.nextSpan().name("parent").start();
              try (Tracer.SpanInScope ignored = tracer.withSpan(span)) {
                c.generate(GenerateRequest.newBuilder().setModel("m").build());
              } finally {
                span.end();
              }
              assertThat(last().get(TRACEPARENT))
                  .isEqualTo("00-" + span.context().traceId() + "-" + span.context().spanId() + "-01");
              // no current span: no header
              c.generate(GenerateRequest.newBuilder().setModel("m").build());
              assertThat(last().get(TRACEPARENT)).isNull();
            });
  }

  @Test
  void configurationMetadataIsGenerated() throws Exception {
    try (var in =
        getClass().getResourceAsStream("/META-INF/spring-configuration-metadata.json")) {
      assertThat(in).isNotNull();
      String json = new String(in.readAllBytes(), StandardCharsets.UTF_8);
      assertThat(json)
          .contains("xinserve.client.address", "xinserve.client.deadline.unary",
              "xinserve.client.ssl.bundle", "xinserve.client.clients", "round_robin");
    }
  }

  private static double cancellations(MeterRegistry reg) {
    return reg.find("xinserve.client.cancellations").counters().stream()
        .mapToDouble(io.micrometer.core.instrument.Counter::count)
        .sum();
  }

  private Metadata last() throws InterruptedException {
    Metadata md = headers.poll(5, TimeUnit.SECONDS);
    Metadata m;
    while ((m = headers.poll()) != null) {
      md = m;
    }
    return md;
  }

  @SuppressWarnings("unused")
  private static Map<String, String> none() {
    return Map.of();
  }
}
