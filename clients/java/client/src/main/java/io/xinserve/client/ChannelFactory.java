package io.xinserve.client;

import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.TlsChannelCredentials;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Supplier;
import javax.net.ssl.KeyManager;
import javax.net.ssl.TrustManager;

/**
 * The channel settings of a {@link XinserveClient.Builder} and the channel built from them:
 * credentials (plaintext, TLS with the JVM's or given CAs, mutual TLS with a PEM pair or a {@link
 * KeyManager}), the service config ({@link ServiceConfig}), keepalive, message limits, and the
 * interceptor chain every call goes through.
 */
final class ChannelFactory {
  String target;
  ManagedChannelBuilder<?> channelBuilder;
  ManagedChannel channel;
  boolean plaintext;
  byte[] trustPem;
  TrustManager trustManager;
  byte[] certChainPem;
  byte[] privateKeyPem;
  KeyManager keyManager;
  String authority;
  Supplier<Map<String, String>> headers;
  Duration keepAliveTime = Duration.ofSeconds(60);
  Duration keepAliveTimeout = Duration.ofSeconds(20);
  boolean keepAliveWithoutCalls;
  int maxInboundMessageSize = 32 * 1024 * 1024;
  RetryPolicy retryPolicy = RetryPolicy.defaults();
  String loadBalancingPolicy = "round_robin";
  final List<ClientInterceptor> interceptors = new ArrayList<>();
  Consumer<ManagedChannelBuilder<?>> customizer;
  String userAgent = "xinserve-java";

  /**
   * The channels of a built client.
   *
   * @param owned the channel the client built and shuts down, or {@code null} for a caller's
   * @param intercepted the channel calls go through, with the client's interceptors
   * @param state the channel whose connectivity state the client reports, or {@code null}
   */
  record Opened(ManagedChannel owned, Channel intercepted, ManagedChannel state) {}

  /**
   * Builds the channel (a caller's channel is used as it is) and wraps it in the interceptors:
   * ABORTED-as-cancelled, the client headers, then the caller's in the order given.
   *
   * @return the channels
   * @throws IllegalStateException if no target, channel builder or channel was given
   * @throws UncheckedIOException if PEM material cannot be parsed
   */
  Opened open() {
    ManagedChannel owned = null;
    Channel base;
    if (channel != null) {
      base = channel;
    } else {
      owned = build();
      base = owned;
    }
    List<ClientInterceptor> all = new ArrayList<>();
    all.add(new AbortedAsCancelled());
    all.add(new ClientHeaders.Interceptor(headers));
    // ClientInterceptors.intercept runs the last one first: reverse the user's order
    List<ClientInterceptor> user = new ArrayList<>(interceptors);
    Collections.reverse(user);
    all.addAll(user);
    return new Opened(owned, ClientInterceptors.intercept(base, all), channel != null ? channel : owned);
  }

  private ManagedChannel build() {
    MissingClientCertificate missingCertificate = null;
    ManagedChannelBuilder<?> b = channelBuilder;
    if (b == null) {
      if (target == null) {
        throw new IllegalStateException("target (or channelBuilder/channel) is required");
      }
      if (!plaintext && keyManager == null && certChainPem == null) {
        missingCertificate = MissingClientCertificate.register();
      }
      b = Grpc.newChannelBuilder(target, credentials(missingCertificate));
    }
    if (authority != null) {
      b.overrideAuthority(authority);
    }
    b.defaultServiceConfig(ServiceConfig.of(loadBalancingPolicy, retryPolicy, missingCertificate));
    if (retryPolicy.enabled()) {
      b.enableRetry();
      b.maxRetryAttempts(retryPolicy.maxAttempts());
    } else {
      b.disableRetry();
    }
    b.maxInboundMessageSize(maxInboundMessageSize);
    b.maxInboundMetadataSize(64 * 1024);
    if (userAgent != null) {
      b.userAgent(userAgent);
    }
    if (!keepAliveTime.isZero()) {
      try {
        b.keepAliveTime(keepAliveTime.toNanos(), TimeUnit.NANOSECONDS);
        b.keepAliveTimeout(keepAliveTimeout.toNanos(), TimeUnit.NANOSECONDS);
        b.keepAliveWithoutCalls(keepAliveWithoutCalls);
      } catch (UnsupportedOperationException ignored) {
        // transports without keepalive (in-process)
      }
    }
    if (customizer != null) {
      customizer.accept(b);
    }
    return b.build();
  }

  private ChannelCredentials credentials(MissingClientCertificate missingCertificate) {
    if (plaintext) {
      return InsecureChannelCredentials.create();
    }
    try {
      TlsChannelCredentials.Builder tls = TlsChannelCredentials.newBuilder();
      if (trustManager != null) {
        tls.trustManager(trustManager);
      } else if (trustPem != null) {
        tls.trustManager(new ByteArrayInputStream(trustPem));
      }
      if (keyManager != null) {
        tls.keyManager(keyManager);
      } else if (certChainPem != null) {
        tls.keyManager(
            new ByteArrayInputStream(certChainPem), new ByteArrayInputStream(privateKeyPem));
      } else if (missingCertificate != null) {
        tls.keyManager(missingCertificate);
      }
      return tls.build();
    } catch (IOException e) {
      throw new UncheckedIOException("invalid TLS material", e);
    }
  }

  /**
   * Shuts a channel down, waiting up to 5 s for running calls, then cancels what is left (2 s
   * more). An interrupt cancels at once and keeps the thread's interrupt flag.
   *
   * @param channel the channel, or {@code null} for nothing to do
   */
  static void shutdown(ManagedChannel channel) {
    if (channel == null) {
      return;
    }
    channel.shutdown();
    try {
      if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
        channel.shutdownNow();
        channel.awaitTermination(2, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }

  static byte[] read(Path p) {
    try {
      return Files.readAllBytes(p);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read " + p, e);
    }
  }
}
