package io.xinserve.spring.boot;

import io.xinserve.client.XinserveClient;

/**
 * Beans of this type get the last word on every auto-configured client's builder (interceptors,
 * executors, a custom token supplier ...).
 */
@FunctionalInterface
public interface XinserveClientCustomizer {
  /**
   * Customises one client's builder before it is built.
   *
   * @param clientName {@code "default"} for {@code xinserve.client.*}, else the name under {@code
   *     xinserve.client.clients}
   * @param builder the builder, with the properties already applied
   */
  void customize(String clientName, XinserveClient.Builder builder);
}
