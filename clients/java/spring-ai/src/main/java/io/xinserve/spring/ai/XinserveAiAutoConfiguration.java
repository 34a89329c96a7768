package io.xinserve.spring.ai;

import io.xinserve.spring.boot.XinserveClients;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.embedding.EmbeddingModel;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;

/**
 * Auto-configures a Spring AI {@link XinserveChatModel} and {@link XinserveEmbeddingModel} when
 * Spring AI is on the class path, over the xinserve client named by {@code xinserve.ai.client}
 * (default: the default client of {@code xinserve.client.*}). Each backs off when the application
 * defines its own bean of that type, or with {@code xinserve.ai.chat.enabled=false} / {@code
 * xinserve.ai.embedding.enabled=false}.
 *
 * <p>The same sources are built for Spring Boot 3.5 / Spring AI 1.1 ({@code xinserve-spring-ai},
 * on {@code xinserve-spring-boot-starter}) and Spring Boot 4.0 / Spring AI 2.0 ({@code
 * xinserve-spring-ai-boot4}, on {@code xinserve-spring-boot4-starter}); on the other Boot
 * generation the context fails to start, naming the artifact to use.
 */
@AutoConfiguration(afterName = "io.xinserve.spring.boot.XinserveClientAutoConfiguration")
@ConditionalOnClass({ChatModel.class, XinserveClients.class})
@ConditionalOnBean(XinserveClients.class)
@EnableConfigurationProperties(XinserveAiProperties.class)
public class XinserveAiAutoConfiguration {

  /** Fails at start-up on a Spring Boot generation other than the one this jar was built for. */
  public XinserveAiAutoConfiguration() {
    java.util.Properties built = BuiltFor.properties();
    BuiltFor.require(
        SpringBootVersion.getVersion(), built.getProperty("spring-boot.version"), built.getProperty("artifact"));
  }

  /**
   * @param clients the configured clients
   * @param properties {@code xinserve.ai.*}
   * @param toolCallingManager the application's {@link ToolCallingManager} (Spring AI's tool
   *     auto-configuration defines one that resolves tool names to beans); Spring AI's default
   *     when there is none
   * @return the chat model
   * @throws java.util.NoSuchElementException if {@code xinserve.ai.client} names no client
   */
  @Bean
  @ConditionalOnMissingBean(XinserveChatModel.class)
  @ConditionalOnProperty(prefix = "xinserve.ai.chat", name = "enabled", matchIfMissing = true)
  public XinserveChatModel xinserveChatModel(
      XinserveClients clients,
      XinserveAiProperties properties,
      ObjectProvider<ToolCallingManager> toolCallingManager) {
    return new XinserveChatModel(
        clients.get(properties.getClient()),
        properties.getChat().getOptions(),
        toolCallingManager.getIfUnique());
  }

  /**
   * @param clients the configured clients
   * @param properties {@code xinserve.ai.*}
   * @return the embedding model
   */
  @Bean
  @ConditionalOnMissingBean(XinserveEmbeddingModel.class)
  @ConditionalOnClass(EmbeddingModel.class)
  @ConditionalOnProperty(prefix = "xinserve.ai.embedding", name = "enabled", matchIfMissing = true)
  public XinserveEmbeddingModel xinserveEmbeddingModel(
      XinserveClients clients, XinserveAiProperties properties) {
    return new XinserveEmbeddingModel(
        clients.get(properties.getClient()), properties.getEmbedding().getModel());
  }
}
