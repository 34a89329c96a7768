package io.xinserve.spring.boot;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code xinserve.client.*}: the default client's settings, named clients, health and metrics.
 *
 * <pre>
 * xinserve:
 *   client:
 *     address: dns:///xinserve.internal:50051
 *     ssl.bundle: xinserve
 *     token-file: /var/run/secrets/xinserve/token
 *     deadline.unary: 10s
 *     clients:
 *       embeddings:
 *         address: dns:///xinserve-embed.internal:50051
 * </pre>
 */
@ConfigurationProperties(prefix = "xinserve.client")
public class XinserveClientProperties extends XinserveClientSettings {
  /** Whether to auto-configure xinserve clients at all. */
  private boolean enabled = true;

  /**
   * Named clients, each with the same settings as the default client; unset settings are
   * inherited from the default client. Inject XinserveClients and call get(name).
   */
  private Map<String, XinserveClientSettings> clients = new LinkedHashMap<>();

  /** Actuator health contributor. */
  private final Health health = new Health();

  /** Micrometer metrics. */
  private final Metrics metrics = new Metrics();

  /** @return whether auto-configuration is enabled */
  public boolean isEnabled() {
    return enabled;
  }

  /** @param enabled whether auto-configuration is enabled */
  public void setEnabled(boolean enabled) {
    this.enabled = enabled;
  }

  /** @return the named clients */
  public Map<String, XinserveClientSettings> getClients() {
    return clients;
  }

  /** @param clients the named clients */
  public void setClients(Map<String, XinserveClientSettings> clients) {
    this.clients = clients;
  }

  /** @return health settings */
  public Health getHealth() {
    return health;
  }

  /** @return metrics settings */
  public Metrics getMetrics() {
    return metrics;
  }

  /** Actuator health of each client through grpc.health.v1. */
  public static class Health {
    /** Whether to contribute "xinserve" to the Actuator health endpoint. */
    private boolean enabled = true;

    /** Deadline of each health check. */
    private Duration timeout = Duration.ofSeconds(2);

    /** Service name to check: "" for the whole server, or "xinserve.v1.InferenceService". */
    private String service = "";

    /** @return whether enabled */
    public boolean isEnabled() {
      return enabled;
    }

    /** @param enabled whether enabled */
    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    /** @return the check deadline */
    public Duration getTimeout() {
      return timeout;
    }

    /** @param timeout the check deadline */
    public void setTimeout(Duration timeout) {
      this.timeout = timeout;
    }

    /** @return the checked service name */
    public String getService() {
      return service;
    }

    /** @param service the checked service name */
    public void setService(String service) {
      this.service = service;
    }
  }

  /** Micrometer metrics of the clients' calls. */
  public static class Metrics {
    /**
     * Whether to record xinserve.client.* meters (calls by method and status, time to first token,
     * tokens, tokens per second, cancellations) when a MeterRegistry is present.
     */
    private boolean enabled = true;

    /** @return whether enabled */
    public boolean isEnabled() {
      return enabled;
    }

    /** @param enabled whether enabled */
    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }
  }
}
