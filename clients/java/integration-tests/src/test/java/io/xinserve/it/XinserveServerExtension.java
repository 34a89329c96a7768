package io.xinserve.it;

import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Starts the shared live servers ({@link LiveServers}) before the first IT class that uses this
 * extension and stops them with SIGTERM when the whole JUnit run ends (the root store closes its
 * {@link AutoCloseable} values then), so the servers are started once per Maven run.
 */
public final class XinserveServerExtension implements BeforeAllCallback {
  private static final ExtensionContext.Namespace NS =
      ExtensionContext.Namespace.create(XinserveServerExtension.class);

  @Override
  public void beforeAll(ExtensionContext context) {
    context.getRoot().getStore(NS).computeIfAbsent("servers", k -> new Stopper(LiveServers.get()), Stopper.class);
  }

  /** Closed by JUnit at the end of the run. */
  static final class Stopper implements AutoCloseable {
    private final LiveServers servers;

    Stopper(LiveServers servers) {
      this.servers = servers;
    }

    @Override
    public void close() throws Exception {
      servers.close();
    }
  }
}
