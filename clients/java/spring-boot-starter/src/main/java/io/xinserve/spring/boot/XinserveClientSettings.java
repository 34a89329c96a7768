package io.xinserve.spring.boot;

import java.nio.file.Path;
import java.time.Duration;
import org.springframework.util.unit.DataSize;

/**
 * Settings of one xinserve client. Used for the default client (xinserve.client.*) and for
 * each named client (xinserve.client.clients.&lt;name&gt;.*); a named client inherits every
 * setting it leaves unset from the default client's.
 */
public class XinserveClientSettings {
  /**
   * gRPC target of the server, e.g. dns:///xinserve.internal:50051 (all addresses of the
   * name, load-balanced) or localhost:50051.
   */
  private String address;

  /**
   * Talk plaintext HTTP/2 instead of TLS. Only for loopback or a trusted sidecar. Default false.
   */
  private Boolean plaintext;

  /**
   * TLS server name override (also the :authority header), when the certificate's name differs
   * from the address.
   */
  private String authority;

  /** Bearer token sent as "authorization: Bearer ..." with every call. */
  private String token;

  /**
   * File holding the bearer token (e.g. a mounted secret); re-read whenever it changes. Takes
   * precedence over token.
   */
  private Path tokenFile;

  /** gRPC load-balancing policy. Default round_robin. */
  private String loadBalancingPolicy;

  /** Largest response message accepted. Default 32MB. */
  private DataSize maxInboundMessageSize;

  /** Messages a streaming iterator requests ahead of its reader. Default 16. */
  private Integer streamPrefetch;

  /**
   * Generative model used when a call names none: the SDK's text shortcuts (generateText,
   * streamText, chat(system, user)), requests with an empty model and the Spring AI ChatModel.
   */
  private String model;

  /** Embedding model used when a call names none (embed(List), the Spring AI EmbeddingModel). */
  private String embeddingModel;

  /** TLS settings. */
  private final Ssl ssl = new Ssl();

  /** Default deadlines. */
  private final Deadline deadline = new Deadline();

  /** HTTP/2 keepalive. */
  private final KeepAlive keepalive = new KeepAlive();

  /** Retry of calls failing with UNAVAILABLE (never after a stream's first token). */
  private final Retry retry = new Retry();

  /** @return the default generative model */
  public String getModel() {
    return model;
  }

  /** @param model the default generative model */
  public void setModel(String model) {
    this.model = model;
  }

  /** @return the default embedding model */
  public String getEmbeddingModel() {
    return embeddingModel;
  }

  /** @param embeddingModel the default embedding model */
  public void setEmbeddingModel(String embeddingModel) {
    this.embeddingModel = embeddingModel;
  }

  /** @return the gRPC target */
  public String getAddress() {
    return address;
  }

  /** @param address the gRPC target */
  public void setAddress(String address) {
    this.address = address;
  }

  /** @return whether to use plaintext */
  public Boolean getPlaintext() {
    return plaintext;
  }

  /** @param plaintext whether to use plaintext */
  public void setPlaintext(Boolean plaintext) {
    this.plaintext = plaintext;
  }

  /** @return the authority override */
  public String getAuthority() {
    return authority;
  }

  /** @param authority the authority override */
  public void setAuthority(String authority) {
    this.authority = authority;
  }

  /** @return the static bearer token */
  public String getToken() {
    return token;
  }

  /** @param token the static bearer token */
  public void setToken(String token) {
    this.token = token;
  }

  /** @return the bearer token file */
  public Path getTokenFile() {
    return tokenFile;
  }

  /** @param tokenFile the bearer token file */
  public void setTokenFile(Path tokenFile) {
    this.tokenFile = tokenFile;
  }

  /** @return the load-balancing policy */
  public String getLoadBalancingPolicy() {
    return loadBalancingPolicy;
  }

  /** @param loadBalancingPolicy the load-balancing policy */
  public void setLoadBalancingPolicy(String loadBalancingPolicy) {
    this.loadBalancingPolicy = loadBalancingPolicy;
  }

  /** @return the maximum inbound message size */
  public DataSize getMaxInboundMessageSize() {
    return maxInboundMessageSize;
  }

  /** @param maxInboundMessageSize the maximum inbound message size */
  public void setMaxInboundMessageSize(DataSize maxInboundMessageSize) {
    this.maxInboundMessageSize = maxInboundMessageSize;
  }

  /** @return the stream prefetch */
  public Integer getStreamPrefetch() {
    return streamPrefetch;
  }

  /** @param streamPrefetch the stream prefetch */
  public void setStreamPrefetch(Integer streamPrefetch) {
    this.streamPrefetch = streamPrefetch;
  }

  /** @return TLS settings */
  public Ssl getSsl() {
    return ssl;
  }

  /** @return deadline settings */
  public Deadline getDeadline() {
    return deadline;
  }

  /** @return keepalive settings */
  public KeepAlive getKeepalive() {
    return keepalive;
  }

  /** @return retry settings */
  public Retry getRetry() {
    return retry;
  }

  /** TLS through a Spring Boot SSL bundle. */
  public static class Ssl {
    /**
     * Name of a Spring SSL bundle (spring.ssl.bundle.*): its trust store verifies the server and
     * its key store, if any, is the client certificate (mutual TLS). Without a bundle the JVM's
     * default trust store is used.
     */
    private String bundle;

    /** @return the bundle name */
    public String getBundle() {
      return bundle;
    }

    /** @param bundle the bundle name */
    public void setBundle(String bundle) {
      this.bundle = bundle;
    }
  }

  /** Default deadlines; a per-call deadline is set with XinserveClient.withDeadline. */
  public static class Deadline {
    /** Deadline of unary calls (generate, chat, embed, ...). Default 30s; 0 means none. */
    private Duration unary;

    /**
     * Deadline of a whole stream (generateStream, chatStream). Default 0: none, so long
     * generations are not cut off.
     */
    private Duration stream;

    /**
     * Cancel a stream that receives no message for this long (it then fails with
     * DEADLINE_EXCEEDED). Default 0: none.
     */
    private Duration streamIdle;

    /** @return the stream idle timeout */
    public Duration getStreamIdle() {
      return streamIdle;
    }

    /** @param streamIdle the stream idle timeout */
    public void setStreamIdle(Duration streamIdle) {
      this.streamIdle = streamIdle;
    }

    /** @return the unary deadline */
    public Duration getUnary() {
      return unary;
    }

    /** @param unary the unary deadline */
    public void setUnary(Duration unary) {
      this.unary = unary;
    }

    /** @return the stream deadline */
    public Duration getStream() {
      return stream;
    }

    /** @param stream the stream deadline */
    public void setStream(Duration stream) {
      this.stream = stream;
    }
  }

  /** HTTP/2 keepalive pings (the server accepts one every 10 s or more rarely). */
  public static class KeepAlive {
    /** Interval between pings. Default 60s; 0 disables keepalive. */
    private Duration time;

    /** Time to wait for a ping's answer before closing the connection. Default 20s. */
    private Duration timeout;

    /** Also ping while no call is open. Default false. */
    private Boolean withoutCalls;

    /** @return the ping interval */
    public Duration getTime() {
      return time;
    }

    /** @param time the ping interval */
    public void setTime(Duration time) {
      this.time = time;
    }

    /** @return the ping timeout */
    public Duration getTimeout() {
      return timeout;
    }

    /** @param timeout the ping timeout */
    public void setTimeout(Duration timeout) {
      this.timeout = timeout;
    }

    /** @return whether to ping without calls */
    public Boolean getWithoutCalls() {
      return withoutCalls;
    }

    /** @param withoutCalls whether to ping without calls */
    public void setWithoutCalls(Boolean withoutCalls) {
      this.withoutCalls = withoutCalls;
    }
  }

  /** Retry policy for UNAVAILABLE. */
  public static class Retry {
    /** Total attempts including the first, 1 (no retry) to 5. Default 3. */
    private Integer maxAttempts;

    /** Backoff before the first retry. Default 200ms. */
    private Duration initialBackoff;

    /** Upper bound of the backoff. Default 2s. */
    private Duration maxBackoff;

    /** Growth of the backoff per attempt. Default 2.0. */
    private Double backoffMultiplier;

    /** @return the maximum attempts */
    public Integer getMaxAttempts() {
      return maxAttempts;
    }

    /** @param maxAttempts the maximum attempts */
    public void setMaxAttempts(Integer maxAttempts) {
      this.maxAttempts = maxAttempts;
    }

    /** @return the initial backoff */
    public Duration getInitialBackoff() {
      return initialBackoff;
    }

    /** @param initialBackoff the initial backoff */
    public void setInitialBackoff(Duration initialBackoff) {
      this.initialBackoff = initialBackoff;
    }

    /** @return the maximum backoff */
    public Duration getMaxBackoff() {
      return maxBackoff;
    }

    /** @param maxBackoff the maximum backoff */
    public void setMaxBackoff(Duration maxBackoff) {
      this.maxBackoff = maxBackoff;
    }

    /** @return the backoff multiplier */
    public Double getBackoffMultiplier() {
      return backoffMultiplier;
    }

    /** @param backoffMultiplier the backoff multiplier */
    public void setBackoffMultiplier(Double backoffMultiplier) {
      this.backoffMultiplier = backoffMultiplier;
    }
  }
}
