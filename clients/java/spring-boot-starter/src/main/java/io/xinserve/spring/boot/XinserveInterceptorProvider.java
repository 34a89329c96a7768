package io.xinserve.spring.boot;

import io.grpc.ClientInterceptor;
import java.util.List;

/**
 * Beans of this type contribute gRPC client interceptors to auto-configured clients (the starter's
 * Micrometer metrics are one).
 */
@FunctionalInterface
public interface XinserveInterceptorProvider {
  /**
   * @param clientName the client's name ({@code "default"} or a key of {@code
   *     xinserve.client.clients})
   * @return interceptors for that client; empty for none
   */
  List<ClientInterceptor> interceptors(String clientName);
}
