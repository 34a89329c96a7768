package io.xinserve.spring.boot;

/**
 * A client's {@code xinserve.client.*} settings cannot be used (no address, unknown or
 * contradictory SSL settings). Reported at start-up by {@link XinserveFailureAnalyzer} with the
 * property to fix.
 */
public class XinserveConfigurationException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  private final String client;
  private final String property;
  private final String action;

  /**
   * @param client the client's name ({@code "default"} or a key of {@code xinserve.client.clients})
   * @param property the offending setting, relative to the client's prefix (e.g. {@code "address"})
   * @param problem what is wrong
   * @param action what to do about it
   */
  public XinserveConfigurationException(String client, String property, String problem, String action) {
    super("xinserve client '" + client + "': " + problem);
    this.client = client;
    this.property = property;
    this.action = action;
  }

  /** @return the client's name */
  public String client() {
    return client;
  }

  /** @return the offending setting, relative to the client's prefix */
  public String property() {
    return property;
  }

  /** @return what to do about it */
  public String action() {
    return action;
  }
}
