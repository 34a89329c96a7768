package io.xinserve.spring.boot;

import io.grpc.ClientInterceptor;
import io.xinserve.client.BearerTokens;
import io.xinserve.client.RetryPolicy;
import io.xinserve.client.XinserveClient;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.springframework.boot.ssl.SslBundle;
import org.springframework.boot.ssl.SslBundles;
import org.springframework.util.StringUtils;

/**
 * Builds {@link XinserveClient}s from {@link XinserveClientSettings}. Declare your own bean of this
 * type to change how every client is built; to adjust a detail, a {@link XinserveClientCustomizer}
 * is usually enough.
 */
public class XinserveClientFactory {
  private final SslBundles sslBundles;
  private final List<XinserveCallHeaders> headers;
  private final List<XinserveClientCustomizer> customizers;
  private final Function<String, List<ClientInterceptor>> interceptors;

  /**
   * @param sslBundles the application's SSL bundles, or {@code null} if none
   * @param headers header contributors for every call
   * @param customizers builder customizers, applied in order
   * @param interceptors interceptors for a client, by client name (metrics)
   */
  public XinserveClientFactory(
      SslBundles sslBundles,
      List<XinserveCallHeaders> headers,
      List<XinserveClientCustomizer> customizers,
      Function<String, List<ClientInterceptor>> interceptors) {
    this.sslBundles = sslBundles;
    this.headers = List.copyOf(headers);
    this.customizers = List.copyOf(customizers);
    this.interceptors = interceptors;
  }

  /**
   * Builds one client.
   *
   * @param name the client's name ({@code "default"} or a key of {@code xinserve.client.clients})
   * @param settings its settings
   * @param defaults settings to inherit unset values from ({@code null} for none)
   * @return the client (connects lazily)
   * @throws IllegalStateException if the address is missing or an SSL bundle is unknown
   */
  public XinserveClient create(
      String name, XinserveClientSettings settings, XinserveClientSettings defaults) {
    XinserveClientSettings d = defaults != null ? defaults : new XinserveClientSettings();
    String address = pick(settings.getAddress(), d.getAddress(), null);
    if (!StringUtils.hasText(address)) {
      throw new XinserveConfigurationException(
          name, "address", "address is not set", "Set " + prefix(name) + ".address, e.g. dns:///xinserve.internal:50051.");
    }
    XinserveClient.Builder b = XinserveClient.builder().target(address);
    // a client's own setting wins over an inherited one: an explicit plaintext=true is not
    // turned into TLS by the default client's SSL bundle, nor an explicit plaintext=false
    // into plaintext by the default client's plaintext=true
    String ownBundle = settings.getSsl().getBundle();
    boolean plaintext;
    if (settings.getPlaintext() != null) {
      plaintext = settings.getPlaintext();
    } else if (StringUtils.hasText(ownBundle)) {
      plaintext = false;
    } else {
      plaintext = Boolean.TRUE.equals(d.getPlaintext());
    }
    if (plaintext && StringUtils.hasText(ownBundle)) {
      throw new XinserveConfigurationException(
          name, "ssl.bundle", "plaintext=true and ssl.bundle=" + ownBundle + " contradict each other",
          "Remove one of " + prefix(name) + ".plaintext and " + prefix(name) + ".ssl.bundle.");
    }
    String bundleName = plaintext ? null : pick(ownBundle, d.getSsl().getBundle(), null);
    if (StringUtils.hasText(bundleName)) {
      if (sslBundles == null) {
        throw new XinserveConfigurationException(
            name, "ssl.bundle", "SSL bundle '" + bundleName + "' is set but no SslBundles exist",
            "Define it under spring.ssl.bundle.pem." + bundleName + " (or .jks).");
      }
      SslBundle bundle;
      try {
        bundle = sslBundles.getBundle(bundleName);
      } catch (RuntimeException e) {
        throw new XinserveConfigurationException(
            name, "ssl.bundle", "SSL bundle '" + bundleName + "' cannot be used: " + e.getMessage(),
            "Define it under spring.ssl.bundle.pem." + bundleName + " (or .jks), or fix "
                + prefix(name) + ".ssl.bundle.");
      }
      var tmf = bundle.getManagers().getTrustManagerFactory();
      if (tmf != null && tmf.getTrustManagers().length > 0) {
        b.trustManager(tmf.getTrustManagers()[0]);
      }
      if (bundle.getStores().getKeyStore() != null) {
        var kmf = bundle.getManagers().getKeyManagerFactory();
        if (kmf != null && kmf.getKeyManagers().length > 0) {
          b.keyManager(kmf.getKeyManagers()[0]);
        }
      }
    }
    if (plaintext) {
      b.plaintext();
    }
    b.defaultModel(pick(settings.getModel(), d.getModel(), null));
    b.defaultEmbeddingModel(pick(settings.getEmbeddingModel(), d.getEmbeddingModel(), null));
    Duration idle = pick(settings.getDeadline().getStreamIdle(), d.getDeadline().getStreamIdle(), null);
    if (idle != null) {
      b.streamIdleTimeout(idle);
    }
    String authority = pick(settings.getAuthority(), d.getAuthority(), null);
    if (StringUtils.hasText(authority)) {
      b.overrideAuthority(authority);
    }
    var tokenFile = pick(settings.getTokenFile(), d.getTokenFile(), null);
    String token = pick(settings.getToken(), d.getToken(), null);
    if (tokenFile != null) {
      b.bearerToken(BearerTokens.fromFile(tokenFile));
    } else if (StringUtils.hasText(token)) {
      b.bearerToken(token);
    }
    b.unaryDeadline(
        pick(settings.getDeadline().getUnary(), d.getDeadline().getUnary(), Duration.ofSeconds(30)));
    b.streamDeadline(
        pick(settings.getDeadline().getStream(), d.getDeadline().getStream(), Duration.ZERO));
    b.keepAlive(
        pick(settings.getKeepalive().getTime(), d.getKeepalive().getTime(), Duration.ofSeconds(60)),
        pick(
            settings.getKeepalive().getTimeout(),
            d.getKeepalive().getTimeout(),
            Duration.ofSeconds(20)),
        pick(settings.getKeepalive().getWithoutCalls(), d.getKeepalive().getWithoutCalls(), false));
    var size = pick(settings.getMaxInboundMessageSize(), d.getMaxInboundMessageSize(), null);
    if (size != null) {
      b.maxInboundMessageSize((int) Math.min(Integer.MAX_VALUE, size.toBytes()));
    }
    Integer prefetch = pick(settings.getStreamPrefetch(), d.getStreamPrefetch(), null);
    if (prefetch != null) {
      b.streamPrefetch(prefetch);
    }
    String lb = pick(settings.getLoadBalancingPolicy(), d.getLoadBalancingPolicy(), null);
    if (StringUtils.hasText(lb)) {
      b.loadBalancingPolicy(lb);
    }
    RetryPolicy def = RetryPolicy.defaults();
    XinserveClientSettings.Retry r = settings.getRetry();
    XinserveClientSettings.Retry dr = d.getRetry();
    b.retryPolicy(
        new RetryPolicy(
            pick(r.getMaxAttempts(), dr.getMaxAttempts(), def.maxAttempts()),
            pick(r.getInitialBackoff(), dr.getInitialBackoff(), def.initialBackoff()),
            pick(r.getMaxBackoff(), dr.getMaxBackoff(), def.maxBackoff()),
            pick(r.getBackoffMultiplier(), dr.getBackoffMultiplier(), def.backoffMultiplier())));
    if (!headers.isEmpty()) {
      b.headers(
          () -> {
            Map<String, String> all = new HashMap<>();
            for (XinserveCallHeaders h : headers) {
              Map<String, String> m = h.headers();
              if (m != null) {
                all.putAll(m);
              }
            }
            return all;
          });
    }
    if (interceptors != null) {
      List<ClientInterceptor> list = interceptors.apply(name);
      if (list != null && !list.isEmpty()) {
        b.intercept(list.toArray(new ClientInterceptor[0]));
      }
    }
    for (XinserveClientCustomizer c : customizers) {
      c.customize(name, b);
    }
    return b.build();
  }

  private static String prefix(String name) {
    return XinserveClients.DEFAULT.equals(name) ? "xinserve.client" : "xinserve.client.clients." + name;
  }

  private static <T> T pick(T own, T inherited, T fallback) {
    return own != null ? own : inherited != null ? inherited : fallback;
  }

}
