package io.xinserve.spring.boot;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

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
import io.xinserve.client.XinserveClient;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GetServerInfoRequest;
import io.xinserve.v1.GetServerInfoResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import io.xinserve.v1.ServerServiceGrpc;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.health.contributor.CompositeHealthContributor;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/** The Boot 4 starter on Spring Boot 4, against an in-process xinserve servicer. */
class XinserveClientBoot4AutoConfigurationTest {
  private static final Metadata.Key<String> AUTH =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final String name = InProcessServerBuilder.generateName();
  private final LinkedBlockingQueue<Metadata> headers = new LinkedBlockingQueue<>();
  private final HealthStatusManager health = new HealthStatusManager();
  private Server server;

  private final XinserveClientCustomizer inProcess =
      (client, b) -> b.channelBuilder(InProcessChannelBuilder.forName(name));

  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(
              AutoConfigurations.of(
                  XinserveClientAutoConfiguration.class, XinserveHealthAutoConfiguration.class))
          .withBean(XinserveClientCustomizer.class, () -> inProcess);

  @BeforeEach
  void start() throws Exception {
    ServerInterceptor recorder =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata md, ServerCallHandler<Q, R> next) {
            headers.add(md);
            if ("Bearer bad".equals(md.get(AUTH))) {
              call.close(io.grpc.Status.UNAUTHENTICATED, new Metadata());
              return new ServerCall.Listener<>() {};
            }
            return next.startCall(call, md);
          }
        };
    server =
        InProcessServerBuilder.forName(name)
            .addService(
                ServerInterceptors.intercept(
                    new InferenceServiceGrpc.InferenceServiceImplBase() {
                      @Override
                      public void generate(GenerateRequest r, StreamObserver<GenerateResponse> out) {
                        out.onNext(
                            GenerateResponse.newBuilder()
                                .addOutputs(CompletionOutput.newBuilder().setText("to " + r.getModel()))
                                .build());
                        out.onCompleted();
                      }
                    },
                    recorder))
            .addService(
                ServerInterceptors.intercept(
                    new ServerServiceGrpc.ServerServiceImplBase() {
                      @Override
                      public void getServerInfo(
                          GetServerInfoRequest r, StreamObserver<GetServerInfoResponse> out) {
                        out.onNext(GetServerInfoResponse.getDefaultInstance());
                        out.onCompleted();
                      }
                    },
                    recorder))
            .addService(health.getHealthService())
            .build()
            .start();
  }

  @AfterEach
  void stop() throws Exception {
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }

  @Test
  void runsOnSpringBoot4() {
    assertThat(SpringBootVersion.getVersion()).startsWith("4.");
  }

  @Test
  void clientsFromPropertiesWithTokenAndDefaultModel() {
    runner
        .withPropertyValues(
            "xinserve.client.address=x:1",
            "xinserve.client.token=t-1",
            "xinserve.client.model=tiny",
            "xinserve.client.clients.b.address=y:1")
        .run(
            ctx -> {
              XinserveClient c = ctx.getBean(XinserveClient.class);
              assertThat(c.generate(io.xinserve.v1.GenerateRequest.newBuilder().setPrompt("hi").build()).getOutputs(0).getText()).isEqualTo("to tiny");
              assertThat(headers.poll(30, TimeUnit.SECONDS).get(AUTH)).isEqualTo("Bearer t-1");
              assertThat(ctx.getBean(XinserveClients.class).asMap()).containsOnlyKeys("default", "b");
            });
  }

  @Test
  void healthUsesBoot4sHealthApiAndTheClientsCredentials() {
    health.setStatus("", ServingStatus.SERVING);
    runner
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.token=good")
        .run(
            ctx -> {
              HealthIndicator h = ctx.getBean("xinserveHealthContributor", HealthIndicator.class);
              assertThat(h.health().getStatus()).isEqualTo(Status.UP);
              assertThat(h.health().getDetails()).containsEntry("target", "x:1");
            });
    runner
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.token=bad")
        .run(
            ctx -> {
              HealthIndicator h = ctx.getBean("xinserveHealthContributor", HealthIndicator.class);
              assertThat(h.health().getStatus()).isEqualTo(Status.DOWN);
              assertThat(h.health().getDetails()).containsEntry("code", "UNAUTHENTICATED");
            });
    runner
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.clients.b.address=y:1")
        .run(
            ctx ->
                assertThat(ctx.getBean("xinserveHealthContributor"))
                    .isInstanceOf(CompositeHealthContributor.class));
    runner
        .withPropertyValues("xinserve.client.address=x:1", "management.health.xinserve.enabled=false")
        .run(ctx -> assertThat(ctx).doesNotHaveBean("xinserveHealthContributor"));
  }

  @Test
  void configurationErrorsFailTheStartNamingTheProperty() {
    runner
        .withPropertyValues("xinserve.client.clients.b.plaintext=true")
        .run(
            ctx -> {
              assertThat(ctx).hasFailed();
              assertThat(ctx.getStartupFailure())
                  .rootCause()
                  .isInstanceOf(XinserveConfigurationException.class)
                  .hasMessageContaining("'b'")
                  .hasMessageContaining("address is not set");
            });
  }

  @Test
  void builtForBoot4AndTheBoot3BuildRefusesThisRuntime() {
    // this jar was built for Boot 4 and runs on it
    assertThat(BootGeneration.builtFor().getProperty("artifact")).isEqualTo("xinserve-spring-boot4-starter");
    assertThat(BootGeneration.builtFor().getProperty("spring-boot.version")).startsWith("4.");
    BootGeneration.requireBuiltGeneration();
    // the Boot 3 starter's jar (the same shared auto-configuration, built for 3) refuses it
    assertThatThrownBy(
            () ->
                BootGeneration.require(
                    SpringBootVersion.getVersion(),
                    3,
                    "xinserve-spring-boot-starter",
                    "xinserve-spring-boot4-starter"))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("Spring Boot " + SpringBootVersion.getVersion())
        .hasMessageContaining("xinserve-spring-boot4-starter");
    assertThatThrownBy(
            () -> BootGeneration.require("3.5.7", 4, "xinserve-spring-boot4-starter", "xinserve-spring-boot-starter"))
        .hasMessageContaining("use io.xinserve:xinserve-spring-boot-starter");
  }
}
