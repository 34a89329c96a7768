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
          .withConfiguration(AutoConfigurations.of(XinserveClientAutoConfiguration.class))
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
            out.onNext(
                GenerateResponse.newBuilder()
                    .setUsage(Usage.newBuilder().setCompletionTokens(7))
                    .build());
            out.onCompleted();
          }

          @Override
          public void generateStream(GenerateRequest r, StreamObserver<GenerateStreamResponse> out) {
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
  void userDefinedClientWins() {
    runner
        .withPropertyValues("xinserve.client.address=x:1")
        .withBean(
            "myClient",
            XinserveClient.class,
            () -> XinserveClient.builder().channelBuilder(InProcessChannelBuilder.forName(name)).build())
        .run(ctx -> assertThat(ctx.getBeansOfType(XinserveClient.class)).containsOnlyKeys("myClient"));
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
              // a cancelled call is counted
              var f = c.generateAsync(GenerateRequest.newBuilder().setModel("m").build());
              f.cancel(true);
              c.generateStream(GenerateRequest.newBuilder().setModel("m").build()).close();
              long deadline = System.currentTimeMillis() + 5000;
              while (reg.find("xinserve.client.cancellations").counter() == null
                  && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
              }
              assertThat(reg.find("xinserve.client.cancellations").counter()).isNotNull();
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
